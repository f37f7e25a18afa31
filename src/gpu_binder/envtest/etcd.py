"""etcd for the control plane: one member on random loopback ports, its data in the work
directory, fsync off (a test store, not a durable one)."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from .process import LOOPBACK, Process, etcd_healthy, free_port, launch, start_ready


def start_etcd(
    binary: Path,
    work: Path,
    flags: Mapping[str, str | None],
    timeout: float,
    again: tuple[str, str] | None = None,
) -> tuple[Process, str, str]:
    """Start etcd and wait until /health answers; the process, its client and peer URLs.

    flags override or add flags (names without ``--``; None removes a default flag).
    again: the (client, peer) URLs of a stopped run to start again on, with its data.
    """
    data_dir = work / "etcd-data"
    client = peer = ""

    def start() -> tuple[Process, Callable[[], bool]]:
        nonlocal client, peer
        if again is None:
            shutil.rmtree(data_dir, ignore_errors=True)
            data_dir.mkdir(mode=0o700, parents=True)
            client = f"http://{LOOPBACK}:{free_port()}"
            peer = f"http://{LOOPBACK}:{free_port()}"
        else:
            client, peer = again
        defaults: dict[str, str | None] = {
            "name": "envtest",
            "data-dir": str(data_dir),
            "listen-client-urls": client,
            "advertise-client-urls": client,
            "listen-peer-urls": peer,
            "initial-advertise-peer-urls": peer,
            "initial-cluster": f"envtest={peer}",
            # A restart joins the member's own data; "new" is ignored once data exists.
            "initial-cluster-state": "new",
            "unsafe-no-fsync": "true",
            "log-level": "warn",
        }
        proc = launch("etcd", binary, work, defaults, flags)
        return proc, functools.partial(etcd_healthy, client)

    return start_ready(start, "etcd /health", timeout), client, peer
