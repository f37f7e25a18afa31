"""bench start installs what a cluster applies before gpu-binder runs in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from gpu_binder.bench import start
from gpu_binder.binder.config import Config
from gpu_binder.envtest import ControlPlane


@dataclass
class Response:
    ok: bool = True
    status: int = 201
    body: bytes = b""


class Recorder:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    def request(self, method: str, path: str, doc: dict[str, Any]) -> Response:
        self.posted.append((doc["kind"], doc["metadata"]["name"]))
        return Response()


def test_the_ledgers_namespace_is_made_before_the_binder_runs() -> None:
    """Without it every usage record's create is a 404, and the binder's full passes abort."""
    cp = Recorder()
    start.install_rbac(cast(ControlPlane, cp))
    assert ("Namespace", Config().ledger_namespace) in cp.posted
    assert cp.posted.index(("Namespace", Config().ledger_namespace)) < cp.posted.index(
        ("Namespace", "gpu-binder")
    )
