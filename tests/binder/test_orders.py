"""Orders: every VM that should hold GPUs is bound, oldest first, where its class's
policy and topology say; sets of VMs stopped longer than releaseAfterStopped go."""

from __future__ import annotations

from datetime import timedelta

from gpu_binder.api.types import BindReason, Phase
from gpu_binder.binder.config import Config

from .cluster import A100, A100_DEVICE_ID, A100_RESOURCE, H100, T0, Cluster, gpu_name


async def test_a_vm_is_bound_its_ordered_gpus_on_one_node(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    cluster.vm("vm", 3, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    assert len(devices) == 3
    cluster.node_of("vm")
    for name in devices:
        d = cluster.device(name)
        assert d.status.phase == Phase.BOUND
        assert d.status.binding is not None and d.status.binding.reason == BindReason.ORDER
    [event] = cluster.events_of("vm", "GPUOrder")  # one Event per decision
    assert all(name in event.message for name in devices)


async def test_a_stopped_vm_with_no_reservation_limit_is_bound_too(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, running=False)
    await cluster.settle_after(days=30)
    assert len(cluster.set_of("vm")) == 2


async def test_orders_are_placed_oldest_first(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("young", 8, created=T0 - timedelta(minutes=1))
    cluster.vm("old", 8, created=T0 - timedelta(hours=1))
    await cluster.settle()
    assert len(cluster.set_of("old")) == 8
    assert cluster.set_of("young") == []
    [refused] = cluster.events_of("young", "GPUUnplaceable")
    assert refused.type == "Warning" and "8 × h100 requested" in refused.message


async def test_an_unplaceable_order_is_bound_when_capacity_frees(cluster: Cluster) -> None:
    cluster.gpu_class(cleaning="None")
    cluster.node("node-a")
    cluster.vm("old", 8, created=T0 - timedelta(hours=1))
    cluster.vm("young", 8)
    await cluster.settle()
    await cluster.delete_vm("old")
    await cluster.settle()
    assert len(cluster.set_of("young")) == 8


async def test_pack_puts_an_order_on_the_fullest_node_that_fits(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("first", 4, created=T0 - timedelta(hours=1))
    await cluster.settle()
    cluster.vm("second", 2)
    await cluster.settle()
    assert cluster.node_of("second") == cluster.node_of("first")


async def test_pack_keeps_a_whole_node_free_for_an_8_gpu_order(cluster: Cluster) -> None:
    for node in ("node-a", "node-b", "node-c"):
        cluster.node(node)
    for i in range(4):
        cluster.vm(f"small-{i}", 2, created=T0 - timedelta(hours=2, minutes=i))
    await cluster.settle()
    cluster.vm("big-1", 8, created=T0 - timedelta(hours=1))
    cluster.vm("big-2", 8)
    await cluster.settle()
    assert len({cluster.node_of(f"small-{i}") for i in range(4)}) == 1
    assert len(cluster.set_of("big-1")) == 8 and len(cluster.set_of("big-2")) == 8


async def test_spread_puts_an_order_on_the_emptiest_node(cluster: Cluster) -> None:
    cluster.gpu_class(policy="Spread")
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.node("node-c")
    for i in range(3):
        cluster.vm(f"vm-{i}", 2, created=T0 - timedelta(minutes=10 - i))
    await cluster.settle()
    assert {cluster.node_of(f"vm-{i}") for i in range(3)} == {"node-a", "node-b", "node-c"}


async def test_an_order_takes_the_tightest_numa_node_that_holds_it(cluster: Cluster) -> None:
    cluster.gpu_class(topology="NUMA")
    cluster.node("node-a", numa=[0, 0, 0, 0, 1, 1, 1, 1])
    cluster.vm("one", 1, created=T0 - timedelta(hours=1))
    await cluster.settle()
    assert cluster.set_of("one") == [gpu_name("node-a", 0)]
    cluster.vm("three", 3)
    await cluster.settle()
    assert cluster.set_of("three") == [gpu_name("node-a", s) for s in (1, 2, 3)]


async def test_a_numa_order_never_spans_numa_nodes_when_one_could_hold_it(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(topology="NUMA")
    cluster.node("node-a", numa=[0, 0, 0, 0, 1, 1, 1, 1])
    cluster.node("node-b", numa=[0, 0, 0, 0, 1, 1, 1, 1])
    cluster.vm("a0", 1, created=T0 - timedelta(hours=3))
    cluster.vm("a1", 1, created=T0 - timedelta(hours=2))
    await cluster.settle()
    # node-a: one taken from each NUMA node would leave 3 + 3; Pack keeps them on node-a.
    taken = set(cluster.set_of("a0") + cluster.set_of("a1"))
    cluster.vm("four", 4)
    await cluster.settle()
    numas = {cluster.device(n).spec.numa_node for n in cluster.set_of("four")}
    assert len(numas) == 1
    assert not taken & set(cluster.set_of("four"))


async def test_an_nvlink_order_stays_inside_one_nvlink_domain(cluster: Cluster) -> None:
    cluster.gpu_class(topology="NVLink")
    cluster.node("node-a", nvlink=["nv0", "nv1"] * 4)
    cluster.vm("vm", 4)
    await cluster.settle()
    domains = {cluster.device(n).spec.nvlink_domain for n in cluster.set_of("vm")}
    assert len(domains) == 1


async def test_an_order_bigger_than_any_domain_takes_whole_domains(cluster: Cluster) -> None:
    cluster.gpu_class(topology="NUMA")
    cluster.node("node-a", numa=[0, 0, 0, 0, 1, 1, 1, 1])
    cluster.vm("vm", 8)
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 8


async def test_a_stopped_vm_keeps_its_gpus_within_release_after_stopped(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle_after(hours=3)
    await cluster.stop("vm")
    await cluster.settle_after(minutes=9)
    assert cluster.set_of("vm") == devices


async def test_a_vm_stopped_longer_than_release_after_stopped_loses_its_gpus(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle_after(hours=3)
    await cluster.stop("vm")
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []
    assert all(cluster.phase(n) == Phase.CLEANING for n in devices)
    released = cluster.events_of("vm", "GPUReleased")
    assert released and "stopped for longer than 0:10:00" in released[0].message


async def test_a_running_vm_keeps_its_gpus_past_release_after_stopped(cluster: Cluster) -> None:
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle_after(hours=3)
    assert cluster.set_of("vm") == devices


async def test_a_released_stopped_vm_is_bound_again_when_it_starts(cluster: Cluster) -> None:
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2)
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []
    cluster.set_running("vm", True)
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2


async def test_an_order_of_two_classes_is_placed_on_one_node_holding_both(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID)
    cluster.node("node-a", 4)
    cluster.node("node-b", 2)
    cluster.node("node-b", 2, class_name=A100, first_slot=2)
    cluster.vm("vm", 2, extra={A100_RESOURCE: 1})
    await cluster.settle()
    devices = cluster.set_of("vm")
    assert cluster.node_of("vm") == "node-b"
    assert sorted(cluster.device(n).status.class_name for n in devices) == [A100, H100, H100]


async def test_an_order_of_two_classes_that_no_node_holds_says_so(cluster: Cluster) -> None:
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID)
    cluster.node("node-a", 4)
    cluster.node("node-b", 2, class_name=A100)
    cluster.vm("vm", 2, extra={A100_RESOURCE: 1})
    await cluster.settle()
    assert cluster.set_of("vm") == []
    [event] = cluster.events_of("vm", "GPUUnplaceable")
    assert "all of them must be on one node" in event.message


async def test_a_deleted_unplaceable_vm_leaves_nothing_in_the_binders_memory(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.vm("big", 4)
    await cluster.settle()
    memory = cluster.binder.memory
    assert "tenant/big" in memory.waiting.unplaceable and cluster.events_of("big", "GPUUnplaceable")
    await cluster.delete_vm("big")
    await cluster.settle()
    assert "tenant/big" not in memory.waiting.unplaceable
    assert not [k for k in memory.said if "tenant/big" in k]
    assert "tenant/big" not in memory.verdicts("orders")


async def test_a_pass_binds_at_most_orders_per_pass_the_oldest_and_runs_again_at_once() -> None:
    cluster = Cluster(config=Config(orders_per_pass=2))
    cluster.gpu_class()
    cluster.node("node-a")
    await cluster.settle()
    for i, minutes in enumerate((3, 1, 2)):
        cluster.vm(f"vm-{i}", 1, created=T0 - timedelta(minutes=minutes))
    result = await cluster.run()
    assert [bool(cluster.set_of(f"vm-{i}")) for i in range(3)] == [True, False, True]
    assert result.requeue_after == timedelta(0)
    result = await cluster.run()
    assert all(cluster.set_of(f"vm-{i}") for i in range(3))
    assert result.requeue_after == cluster.config.resync
