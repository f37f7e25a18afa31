"""Client-certificate users of the control plane, each with its own kubeconfig."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .certs import ControlPlaneCerts
from .files import write_kubeconfig


@dataclass(frozen=True)
class User:
    """A client-certificate user of the control plane, with its own kubeconfig."""

    name: str
    groups: tuple[str, ...]
    cert_file: Path
    key_file: Path
    kubeconfig: Path

    def ssl_context(self, ca_file: Path) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca_file))
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx


def issue_user(
    certs: ControlPlaneCerts, url: str, directory: Path, name: str, groups: Sequence[str] = ()
) -> User:
    """A new user (CN=name, O=groups) signed by the control plane's CA, its certificate,
    key and kubeconfig written into directory. Nothing is granted to it."""
    pair = certs.ca.issue_client(name, groups)
    directory.mkdir(exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    cert, key = pair.write(directory, safe)
    kubeconfig = directory / f"{safe}.kubeconfig"
    write_kubeconfig(kubeconfig, url, certs.ca.cert_pem, pair.cert_pem, pair.key_pem, name)
    return User(name, tuple(groups), cert, key, kubeconfig)
