"""Derived state: class status counts, and node status (degraded nodes, shortfall Lost)."""

from __future__ import annotations

from gpu_binder.api.kubevirt import Node
from gpu_binder.api.types import Phase

from .cluster import H100_RESOURCE, Cluster, gpu_name


async def test_class_status_counts_devices_by_phase(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    cluster.vm("stopped", 2)
    cluster.vm("running", 1, running=True)
    cluster.vm("gone", 1)
    await cluster.settle()
    cluster.start("running")
    await cluster.delete_vm("gone")
    await cluster.settle()
    s = cluster.gpu_class_status()
    assert (s.devices, s.available, s.bound, s.attached, s.cleaning, s.lost) == (8, 4, 2, 1, 1, 0)


async def test_class_status_counts_lost_devices(cluster: Cluster) -> None:
    [device, *_] = cluster.node("node-a", 2)
    await cluster.settle()
    cluster.set_health(device, False)
    await cluster.settle()
    await cluster.settle_after(minutes=5)
    assert cluster.gpu_class_status().lost == 1


async def test_largest_free_set_is_the_largest_order_that_fits_now(cluster: Cluster) -> None:
    cluster.node("node-a", 8)
    cluster.node("node-b", 4)
    cluster.vm("vm", 3)
    await cluster.settle()
    # Pack puts 3 on node-b (leaving 1) and keeps node-a's 8 whole.
    assert cluster.gpu_class_status().largest_free_set == 8
    cluster.cordon("node-a")
    await cluster.settle()
    assert cluster.gpu_class_status().largest_free_set == 1


async def test_class_status_observes_the_class_generation(cluster: Cluster) -> None:
    cluster.node("node-a", 1)
    await cluster.settle()
    s = cluster.gpu_class_status()
    assert s.observed_generation >= 1
    assert any(c.type == "Ready" and c.status == "True" for c in s.conditions)


# --- node status -----------------------------------------------------------------------


def degraded_condition(cluster: Cluster, node: str) -> str | None:
    n = cluster.client.peek(Node, node)
    assert n is not None
    for c in n.raw.get("status", {}).get("conditions", []):
        if c.get("type") == "GPUDegraded":
            return str(c.get("status"))
    return None


async def test_a_node_serving_too_few_slots_is_degraded_after_the_grace(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    await cluster.settle()
    cluster.serve("node-a", [0, 1, 2])
    await cluster.settle()
    await cluster.settle_after(minutes=1)
    assert degraded_condition(cluster, "node-a") is None, "within degradedGrace"
    await cluster.settle_after(minutes=1)
    assert degraded_condition(cluster, "node-a") == "True"
    lost = cluster.device(gpu_name("node-a", 3))
    assert lost.status.phase == Phase.LOST
    assert "does not serve it" in lost.status.lost_reason
    assert all(cluster.phase(gpu_name("node-a", s)) == Phase.AVAILABLE for s in (0, 1, 2))


async def test_a_degraded_node_takes_no_new_sets_and_its_stopped_sets_move(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 8)
    cluster.vm("vm", 2)
    await cluster.settle()
    assert cluster.node_of("vm") == "node-a"
    cluster.serve("node-a", [0, 1, 2])
    await cluster.settle()
    await cluster.settle_after(minutes=2)
    assert cluster.node_of("vm") == "node-b"
    cluster.vm("late", 1)
    await cluster.settle()
    assert cluster.node_of("late") == "node-b"
    assert cluster.gpu_class_status().largest_free_set == 5


async def test_a_degraded_node_recovers_when_its_plugin_serves_again(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    await cluster.settle()
    cluster.serve("node-a", [0, 1, 2])
    await cluster.settle()
    await cluster.settle_after(minutes=2)
    cluster.serve("node-a", [0, 1, 2, 3])
    await cluster.settle()
    assert degraded_condition(cluster, "node-a") == "False"
    assert cluster.phase(gpu_name("node-a", 3)) == Phase.CLEANING


async def test_node_pinning_takes_the_shortfall_from_unattached_devices(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(pinning="Node")
    devices = cluster.node("node-a", 4)
    n = cluster.client.peek(Node, "node-a")
    assert n is not None
    raw = n.to_dict()
    raw["status"]["allocatable"] = {H100_RESOURCE: "4"}
    cluster.client.put(Node.from_dict(raw))
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    raw["status"]["allocatable"] = {H100_RESOURCE: "2"}
    cluster.client.put(Node.from_dict(raw))
    await cluster.settle()
    await cluster.settle_after(minutes=2)
    attached = cluster.set_of("vm")
    assert all(cluster.phase(d) == Phase.ATTACHED for d in attached)
    assert sorted(d for d in devices if cluster.phase(d) == Phase.LOST) == sorted(
        set(devices) - set(attached)
    )


async def test_a_device_matching_two_classes_is_shown_on_both_and_bound_by_neither(
    cluster: Cluster,
) -> None:
    cluster.gpu_class("h100-copy", resource="nvidia.com/copy")
    [device] = cluster.node("node-a", 1)
    cluster.vm("vm", 1)
    await cluster.settle()
    assert cluster.set_of("vm") == []
    for name in ("h100", "h100-copy"):
        [ready] = [c for c in cluster.gpu_class_status(name).conditions if c.type == "Ready"]
        assert (ready.status, ready.reason) == ("False", "AmbiguousMatch")
        assert device in ready.message
    [classified] = cluster.device(device).status.conditions
    assert (classified.reason, classified.message) == (
        "Ambiguous",
        "matches classes h100, h100-copy",
    )


async def test_resolving_an_ambiguous_match_clears_the_error_and_serves_the_device(
    cluster: Cluster,
) -> None:
    cluster.gpu_class("h100-copy", resource="nvidia.com/copy")
    [device] = cluster.node("node-a", 1)
    cluster.vm("vm", 1)
    await cluster.settle()
    cluster.gpu_class("h100-copy", resource="nvidia.com/copy", device_id="0x2331")
    await cluster.settle()
    assert cluster.set_of("vm") == [device]
    assert cluster.device(device).status.conditions == ()
    [ready] = [c for c in cluster.gpu_class_status().conditions if c.type == "Ready"]
    assert ready.status == "True"


async def test_of_two_classes_naming_one_resource_the_older_serves_and_the_newer_says_so(
    cluster: Cluster,
) -> None:
    [old_device] = cluster.node("node-a", 1)
    await cluster.settle_after(minutes=10)
    # Newer, and first by name: neither lets it take the resource VMs order from h100.
    cluster.gpu_class("a-typo", resource=H100_RESOURCE, device_id="0x2331")
    cluster.node("node-b", 1, class_name="a-typo")
    cluster.vm("vm", 1)
    await cluster.settle()
    assert cluster.set_of("vm") == [old_device]
    [ready] = [c for c in cluster.gpu_class_status("a-typo").conditions if c.type == "Ready"]
    assert (ready.status, ready.reason) == ("False", "DuplicateResourceName")
    assert "served by class h100" in ready.message
    [ready] = [c for c in cluster.gpu_class_status().conditions if c.type == "Ready"]
    assert ready.status == "True"


async def test_largest_free_set_counts_only_what_topology_lets_one_order_take(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(topology="NUMA")
    devices = cluster.node("node-a", 4, numa=[0, 0, 1, 1])
    # One free GPU left in each NUMA node: 2 free, but a 2-GPU order must sit in one
    # NUMA node (one of them is that big), so 1 is all one order can have now.
    cluster.set_unschedulable(devices[0])
    cluster.set_unschedulable(devices[2])
    await cluster.settle()
    assert cluster.gpu_class_status().largest_free_set == 1
    # Three free: bigger than either NUMA node, an order of 3 may span them.
    cluster.set_unschedulable(devices[2], False)
    await cluster.settle()
    assert cluster.gpu_class_status().largest_free_set == 3
