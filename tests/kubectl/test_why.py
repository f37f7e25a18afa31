"""`kubectl gpu why NS/NAME`: one paragraph saying why a VM holds what it holds."""

from __future__ import annotations

from binder.cluster import Cluster

from .conftest import kubectl


async def why(cluster: Cluster, vm: str) -> str:
    ran = await kubectl(cluster, "why", vm)
    assert ran.code == 0, ran.err
    assert ran.out.count("\n") == 1, "one paragraph"
    return ran.out


async def test_an_order_no_node_fits_says_the_largest_free_set_and_the_binders_words(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    cluster.vm("big", 8, running=True)
    await cluster.settle()
    said = await why(cluster, "big")
    assert said.startswith("tenant/big is running and orders 8 × h100. It holds none.")
    assert "No node has 8 free h100 GPUs together now (the largest free set is 4)" in said
    assert 'The binder said: GPUUnplaceable 0s ago: "cannot bind:' in said


async def test_a_refused_start_is_said_with_what_kubevirt_does_next(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.vm("vm", 4, running=True)
    cluster.request("vm", 4)
    await cluster.answer_requests()
    said = await why(cluster, "vm")
    assert "Its start was refused: GPURefused" in said
    assert "KubeVirt retries the start" in said


async def test_a_running_vm_on_a_cordoned_node_stays_because_it_cannot_migrate(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-b", 2)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    cluster.cordon("node-a")
    await cluster.settle()
    said = await why(cluster, "vm")
    assert "It holds its 2 GPU(s) on node-a, in use by its running VMI." in said
    assert "Its node node-a is Ready,cordoned, but the set stays while its VMI runs" in said
    assert "cannot live-migrate" in said


async def test_a_moved_set_says_when_and_why(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-b", 2)
    cluster.vm("vm", 2)
    await cluster.settle()
    cluster.cordon(cluster.node_of("vm"))
    await cluster.settle()
    said = await why(cluster, "vm")
    assert "reserved while it is stopped" in said
    assert 'Last moved: GPUMove 0s ago: "bound 2 GPUs' in said


async def test_a_stopped_vm_past_its_grace_holds_none_until_it_starts(cluster: Cluster) -> None:
    cluster.gpu_class("l40s", resource="nvidia.com/L40S", device_id="0x26b9", release_after="10m")
    cluster.node("node-a", 2, class_name="l40s")
    cluster.vm("vm", 1, running=True, resource="nvidia.com/L40S")
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    cluster.finish("vm")
    cluster.set_running("vm", False)
    await cluster.settle()
    await cluster.settle_after(minutes=11)
    said = await why(cluster, "vm")
    assert "It holds none." in said
    assert "A stopped VM holds GPUs only within its class's releaseAfterStopped" in said
    assert "Released: GPUReleased" in said


async def test_a_vm_ordering_no_gpus_is_left_alone(cluster: Cluster) -> None:
    cluster.vm("plain", 0)
    said = await why(cluster, "plain")
    assert said == (
        "tenant/plain is stopped and orders no GPUs. It orders no GPUs of a GPUClass, so "
        "gpu-binder leaves it alone.\n"
    )
