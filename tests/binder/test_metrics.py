"""The binder's metrics: what each tenant holds, and what the chart's alerts read, as
Prometheus scrapes it."""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import generate_latest

from gpu_binder.binder.metrics import Metrics

from .cluster import H100, NAMESPACE, Cluster


def tenant_series(cluster: Cluster) -> dict[tuple[str, str, str], float]:
    out: dict[tuple[str, str, str], float] = {}
    for family in cluster.binder.metrics.registry.collect():
        if family.name == "gpu_binder_tenant_gpus":
            for s in family.samples:
                out[(s.labels["namespace"], s.labels["class_name"], s.labels["state"])] = s.value
    return out


async def test_a_tenants_bound_gpus_are_counted_as_bound(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2)
    await cluster.settle()
    assert tenant_series(cluster) == {(NAMESPACE, "h100", "bound"): 2}


async def test_a_running_vms_gpus_are_counted_as_attached(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    assert tenant_series(cluster) == {(NAMESPACE, "h100", "attached"): 2}


async def test_a_tenant_that_holds_nothing_any_more_leaves_no_series(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 1)
    await cluster.settle()
    await cluster.delete_vm("vm")
    await cluster.settle()
    assert tenant_series(cluster) == {}
    assert b"gpu_binder_tenant_gpus{" not in generate_latest(cluster.binder.metrics.registry)


def gauge(cluster: Cluster, name: str) -> float | None:
    return cluster.binder.metrics.registry.get_sample_value(name)


async def unmanaged_for(cluster: Cluster, seconds: float) -> None:
    """vm's set is on node-a; its VMI has run on node-b, which has too few free devices to
    adopt it, for `seconds` (the attachment grace is 30)."""
    cluster.node("node-a")
    cluster.node("node-b", 1)
    cluster.vm("vm", 2)
    await cluster.settle()
    cluster.start("vm", node="node-b", devices=())
    await cluster.settle()
    await cluster.settle_after(seconds=seconds)


async def refused_adoption(cluster: Cluster) -> None:
    await unmanaged_for(cluster, 30)
    assert gauge(cluster, "gpu_binder_unmanaged_attachments") == 1


async def test_the_unplaceable_gauge_returns_to_zero_when_the_vm_is_deleted(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.vm("big", 4)
    await cluster.settle()
    assert gauge(cluster, "gpu_binder_unplaceable_orders") == 1
    await cluster.delete_vm("big")
    await cluster.settle()
    assert gauge(cluster, "gpu_binder_unplaceable_orders") == 0


async def test_the_unmanaged_gauge_returns_to_zero_when_the_vmi_ends(cluster: Cluster) -> None:
    await refused_adoption(cluster)
    cluster.finish("vm")
    await cluster.settle()
    assert gauge(cluster, "gpu_binder_unmanaged_attachments") == 0


async def test_the_unmanaged_gauge_returns_to_zero_within_a_resync_when_the_vmi_is_removed(
    cluster: Cluster,
) -> None:
    await refused_adoption(cluster)
    await cluster.remove_vmi("vm")  # gone with no end seen (a missed event)
    await cluster.settle_after(seconds=30)
    assert gauge(cluster, "gpu_binder_unmanaged_attachments") == 0


async def test_a_vmi_within_its_attachment_grace_is_not_counted_as_unmanaged(
    cluster: Cluster,
) -> None:
    await unmanaged_for(cluster, 29)
    assert gauge(cluster, "gpu_binder_unmanaged_attachments") == 0


# --- what the chart's alerts read ---------------------------------------------------------


async def test_a_degraded_node_is_counted_past_its_grace_and_not_after_it_recovers(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 4)
    await cluster.settle()
    cluster.serve("node-a", [0, 1, 2])
    await cluster.settle()
    await cluster.settle_after(minutes=1)
    assert gauge(cluster, "gpu_binder_degraded_nodes") == 0, "within degradedGrace"
    await cluster.settle_after(minutes=1)
    assert gauge(cluster, "gpu_binder_degraded_nodes") == 1
    cluster.serve("node-a", [0, 1, 2, 3])
    await cluster.settle()
    assert gauge(cluster, "gpu_binder_degraded_nodes") == 0


def oldest_cleaning(cluster: Cluster) -> dict[str, float]:
    family = "gpu_binder_oldest_cleaning_timestamp_seconds"
    return {
        s.labels["class_name"]: s.value
        for f in cluster.binder.metrics.registry.collect()
        if f.name == family
        for s in f.samples
    }


async def test_the_oldest_release_waiting_for_a_reset_is_exported_until_it_is_reset(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.vm("first", 1)
    cluster.vm("second", 1)
    await cluster.settle()
    first_released = cluster.clock.advance(minutes=1)
    await cluster.delete_vm("first")
    await cluster.settle()
    cluster.clock.advance(minutes=1)
    await cluster.delete_vm("second")
    await cluster.settle()
    assert oldest_cleaning(cluster) == {H100: first_released.timestamp()}
    for name in cluster.world.devices.cleaning.copy():
        cluster.reset(name)
    await cluster.settle()
    assert oldest_cleaning(cluster) == {}, "no series while nothing of the class is cleaning"


def test_build_info_names_the_installed_version() -> None:
    registry = Metrics().registry
    labels = {"version": metadata.version("gpu-binder"), "python": platform.python_version()}
    assert registry.get_sample_value("gpu_binder_build_info", labels) == 1
