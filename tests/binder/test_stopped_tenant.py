"""A tenant cannot hold GPUs past its quota, nor unbilled, by stopping its VMs
(`runStrategy: Halted`): a stopped VM keeps its GPUs, and they are billed as Reserved and
counted against the namespace's quota like running ones (issue 11, attack 5)."""

from __future__ import annotations

from gpu_binder.api.quota import ResourceQuota

from .cluster import H100_RESOURCE, NAMESPACE, Cluster


def quota(cluster: Cluster, gpus: int) -> None:
    raw = {
        "metadata": {"name": "gpus", "namespace": NAMESPACE},
        "spec": {"hard": {f"requests.{H100_RESOURCE}": str(gpus)}},
    }
    cluster.client.put(ResourceQuota.from_dict(raw))


async def test_a_halted_vms_gpus_are_billed_as_reserved_all_along(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, run_strategy="Always")
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    cluster.clock.advance(hours=1)
    cluster.vm("vm", 2, run_strategy="Halted")  # the tenant stops it, keeping its GPUs
    await cluster.stop("vm")
    await cluster.settle()
    halted = cluster.clock.now
    await cluster.settle_after(hours=24)
    assert len(cluster.set_of("vm")) == 2, "a stopped VM keeps its GPUs"
    billing = [r for r in cluster.reserved() if r.spec.end is None]
    assert [r.spec.start for r in billing] == [halted, halted]
    assert all(r.spec.vm == "vm" for r in billing)


async def test_halted_vms_cannot_hold_more_gpus_than_the_quota(cluster: Cluster) -> None:
    quota(cluster, 2)
    cluster.node("node-a")
    cluster.vm("first", 2, run_strategy="Halted")
    await cluster.settle()
    cluster.vm("second", 2, run_strategy="Halted")
    cluster.vm("third", 1, run_strategy="Always")
    await cluster.settle_after(minutes=10)
    assert len(cluster.set_of("first")) == 2
    assert cluster.set_of("second") == cluster.set_of("third") == []
    assert cluster.events_of("second", "GPUQuotaExceeded")
    assert cluster.events_of("third", "GPUQuotaExceeded")
