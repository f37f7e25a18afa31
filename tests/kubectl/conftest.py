"""`kubectl gpu` on the binder tests' embedded cluster: the binder's passes make the state
and its Events (written to the in-memory API, as on a real one), the plugin reads them
through the same Client interface. tests/controlplane/test_kubectl_gpu.py runs it against
a real API server with a kubeconfig."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest

from binder.cluster import Cluster
from gpu_binder.binder.events import ClientRecorder
from gpu_binder.kubectl.command import run


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    c.binder.recorder = ClientRecorder(c.client)
    c.gpu_class()
    return c


@dataclass
class Ran:
    code: int
    out: str
    err: str


async def kubectl(cluster: Cluster, *argv: str, colour: bool = False) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    argv = ("-n", "tenant", *argv)
    code = await run(argv, out, err, client=cluster.client, colour=colour, clock=cluster.clock)
    return Ran(code, out.getvalue(), err.getvalue())
