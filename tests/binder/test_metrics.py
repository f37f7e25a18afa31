"""The binder's metrics: what each tenant holds, as Prometheus scrapes it."""

from __future__ import annotations

from prometheus_client import generate_latest

from .cluster import NAMESPACE, Cluster


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
