"""Orders several classes may serve (gpu.cozystack.io/classes): the binder takes one class
for the whole set, leaves scarce classes to the orders that need them, and once a set
holds a class it is completed, kept and moved in that class."""

from __future__ import annotations

from datetime import timedelta

from gpu_binder.api.types import CLASSES_ANNOTATION

from .cluster import A100, A100_DEVICE_ID, A100_RESOURCE, H100, T0, Cluster

EITHER = {CLASSES_ANNOTATION: f"{H100},{A100}"}


def two_classes(cluster: Cluster) -> None:
    """h100 and a100 under the default policy."""
    cluster.gpu_class(H100, policy="LeastStranded")
    cluster.gpu_class(
        A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID, policy="LeastStranded"
    )


async def test_an_order_goes_to_an_alternative_class_when_its_own_has_no_room(
    cluster: Cluster,
) -> None:
    two_classes(cluster)
    cluster.node("node-h", 2)
    cluster.node("node-a", 4, class_name=A100)
    cluster.vm("vm", 4, running=True, annotations=EITHER)
    await cluster.settle()
    assert cluster.node_of("vm") == "node-a"
    [event] = cluster.events_of("vm", "GPUOrder")
    assert "4 × a100 placed by policy LeastStranded (the VM accepts any of a100, h100)" in (
        event.message
    )


async def test_a_set_never_mixes_classes(cluster: Cluster) -> None:
    two_classes(cluster)
    cluster.node("node-x", 2)
    cluster.node("node-x", 2, class_name=A100, first_slot=2)
    cluster.vm("vm", 4, running=True, annotations=EITHER)
    await cluster.settle()
    assert cluster.set_of("vm") == []  # 2 + 2 on one node is no set of one class


async def test_the_class_restricted_orders_need_is_left_to_them(cluster: Cluster) -> None:
    two_classes(cluster)
    cluster.node("node-h", 8)
    cluster.node("node-a", 8, class_name=A100)
    # Four VMs can only use a100; the flexible one comes first and must not take it.
    cluster.vm("flexible", 4, running=True, annotations=EITHER, created=T0 - timedelta(hours=1))
    for i in range(2):
        cluster.vm(f"a100-only-{i}", 4, running=True, resource=A100_RESOURCE)
    await cluster.settle()
    assert cluster.node_of("flexible") == "node-h"
    assert {cluster.node_of(f"a100-only-{i}") for i in range(2)} == {"node-a"}


async def test_a_set_holding_an_alternative_is_completed_in_it(cluster: Cluster) -> None:
    two_classes(cluster)
    cluster.node("node-h", 8)
    cluster.node("node-a", 2, class_name=A100)
    cluster.vm("vm", 2, running=True, resource=A100_RESOURCE)
    await cluster.settle()
    assert cluster.node_of("vm") == "node-a"
    # The VM now names h100 and accepts both: its a100 set serves it as it is.
    cluster.vm("vm", 2, running=True, annotations=EITHER)
    writes = await cluster.settle()
    assert writes == 0 and cluster.node_of("vm") == "node-a"


async def test_without_the_annotation_only_the_named_class_serves(cluster: Cluster) -> None:
    two_classes(cluster)
    cluster.node("node-a", 4, class_name=A100)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    assert cluster.set_of("vm") == []


async def test_pack_takes_the_least_claimed_class_that_fits(cluster: Cluster) -> None:
    cluster.gpu_class(H100, policy="Pack")
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID, policy="Pack")
    cluster.node("node-h", 8)
    cluster.node("node-a", 8, class_name=A100)
    cluster.vm("flexible", 4, running=True, annotations=EITHER, created=T0 - timedelta(hours=1))
    cluster.vm("h100-only", 4, running=True)
    await cluster.settle()
    assert cluster.node_of("flexible") == "node-a"
    assert cluster.node_of("h100-only") == "node-h"
