"""The binder's writes use the narrowest verb that does them (issue 11, least privilege).

A device's finalizer is a patch of metadata.finalizers, never a PUT of the whole object
(the agent owns the spec); the GPUDegraded condition is one condition set on nodes/status,
never a GET and PUT of the node's whole status. deploy/binder/rbac.yaml grants exactly
these verbs (tests/controlplane/test_rbac.py).
"""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kinds import resource_of
from gpu_binder.api.kubevirt import Node
from gpu_binder.api.types import FINALIZER, GPUDevice
from gpu_binder.sim.memory import MemoryClient

from .cluster import Cluster, gpu_name

VERBS = {
    "get": "get",
    "list": "list",
    "create": "create",
    "update": "update",
    "update_status": "update",
    "patch": "patch",
    "set_condition": "patch",
    "apply": "patch",
    "delete": "delete",
}


class Audited:
    """The binder's client, noting each request as RBAC sees it: (verb, resource)."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self.calls: set[tuple[str, str]] = set()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if name not in VERBS:
            return method

        def noted(first: Any, *args: Any, **kwargs: Any) -> Any:
            kind = first if isinstance(first, type) else type(first)
            sub = "/status" if name in ("update_status", "set_condition") else ""
            self.calls.add((VERBS[name], resource_of(kind).plural + sub))
            return method(first, *args, **kwargs)

        return noted


def audit(cluster: Cluster) -> Audited:
    audited = Audited(cluster.client)
    cluster.binder.client = audited  # type: ignore[assignment]
    return audited


async def test_the_device_finalizer_is_added_by_a_patch(cluster: Cluster) -> None:
    calls = audit(cluster).calls
    names = cluster.node("node-a", 2)
    await cluster.settle()
    assert all(FINALIZER in cluster.device(n).metadata.finalizers for n in names)
    assert ("patch", "gpudevices") in calls
    assert ("update", "gpudevices") not in calls


async def test_a_deleted_device_loses_its_finalizer_by_a_patch(cluster: Cluster) -> None:
    [name, _] = cluster.node("node-a", 2)
    await cluster.settle()
    calls = audit(cluster).calls
    await cluster.delete_device(name)
    await cluster.settle()
    assert cluster.client.peek(GPUDevice, name) is None
    assert calls & {("patch", "gpudevices"), ("update", "gpudevices")} == {("patch", "gpudevices")}


async def test_the_degraded_condition_is_set_alone_without_reading_the_node(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 4)
    await cluster.settle()
    calls = audit(cluster).calls
    cluster.serve("node-a", [0, 1, 2])
    await cluster.settle()
    await cluster.settle_after(minutes=2)
    node = cluster.client.peek(Node, "node-a")
    assert node is not None
    conditions = {c["type"]: c["status"] for c in node.raw["status"]["conditions"]}
    assert conditions["GPUDegraded"] == "True"
    assert conditions["Ready"] == "True", "the kubelet's conditions are left alone"
    assert ("patch", "nodes/status") in calls
    assert not calls & {("get", "nodes"), ("update", "nodes/status")}
    assert cluster.device(gpu_name("node-a", 3)).status.phase is not None
