"""The devices annotation on a VM: the GPUs it holds, readable by its tenant, who may not
list the cluster-scoped GPUDevices; kept by the binder, read by nothing that decides."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import DEVICES_ANNOTATION

from .cluster import NAMESPACE, Cluster, gpu_name


def annotation(cluster: Cluster, vm: str) -> str | None:
    found = cluster.client.peek(VirtualMachine, vm, NAMESPACE)
    assert found is not None
    return found.metadata.annotations.get(DEVICES_ANNOTATION)


async def test_a_bound_vm_names_its_set(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.vm("vm", 2)
    await cluster.settle()
    assert annotation(cluster, "vm") == f"{gpu_name('node-a', 0)},{gpu_name('node-a', 1)}"


async def test_a_move_renames_the_set_and_a_release_removes_it(cluster: Cluster) -> None:
    cluster.gpu_class("l40s", resource="nvidia.com/L40S", device_id="0x26b9", release_after="5m")
    cluster.node("node-a", 1, class_name="l40s")
    cluster.node("node-b", 1, class_name="l40s")
    cluster.vm("vm", 1, resource="nvidia.com/L40S")
    await cluster.settle()
    first = cluster.node_of("vm")
    cluster.cordon(first)
    await cluster.settle()
    other = "node-b" if first == "node-a" else "node-a"
    assert annotation(cluster, "vm") == gpu_name(other, 0)
    await cluster.settle_after(minutes=6)
    assert cluster.set_of("vm") == []
    assert annotation(cluster, "vm") is None


async def test_a_tenants_edit_is_put_right_at_the_next_look(cluster: Cluster) -> None:
    cluster.node("node-a", 1)
    cluster.vm("vm", 1)
    await cluster.settle()
    raw: dict[str, Any] = cluster.client.peek(VirtualMachine, "vm", NAMESPACE).to_dict()  # type: ignore[union-attr]
    raw["metadata"]["annotations"][DEVICES_ANNOTATION] = "someone-elses-gpu"
    cluster.client.put(VirtualMachine.from_dict(raw))
    await cluster.settle()
    assert annotation(cluster, "vm") == gpu_name("node-a", 0)


async def test_a_pass_over_an_unchanged_world_writes_no_annotation(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.vm("vm", 2)
    await cluster.settle()
    assert await cluster.settle_after(minutes=1) == 0
    cluster.restart()
    assert await cluster.settle() == 0, "a new leader finds every annotation right"


async def test_a_new_leader_annotates_the_sets_an_older_binder_left(cluster: Cluster) -> None:
    cluster.node("node-a", 1)
    cluster.vm("vm", 1)
    await cluster.settle()
    raw: dict[str, Any] = cluster.client.peek(VirtualMachine, "vm", NAMESPACE).to_dict()  # type: ignore[union-attr]
    del raw["metadata"]["annotations"][DEVICES_ANNOTATION]  # as a binder before it left it
    cluster.client.put(VirtualMachine.from_dict(raw))
    cluster.restart()
    await cluster.settle()
    assert annotation(cluster, "vm") == gpu_name("node-a", 0)


async def test_a_vm_without_gpus_gets_no_annotation(cluster: Cluster) -> None:
    cluster.vm("plain", 0)
    await cluster.settle()
    assert annotation(cluster, "plain") is None
    assert cluster.binder.metrics.registry.get_sample_value(
        "gpu_binder_writes_total", {"verb": "annotations"}
    ) in (None, 0)
