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
