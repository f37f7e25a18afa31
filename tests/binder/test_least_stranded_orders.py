"""The default policy through the binder: whole nodes stay free for whole-node orders, and
an order goes where it strands the fewest GPUs."""

from __future__ import annotations

from datetime import timedelta

from .cluster import T0, Cluster
from .resources import node_resources, vm_requests


async def test_a_whole_node_stays_free_for_an_8_gpu_order(cluster: Cluster) -> None:
    cluster.gpu_class(policy="LeastStranded")
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


async def test_with_few_orders_known_it_does_as_first_fit_does(cluster: Cluster) -> None:
    cluster.gpu_class(policy="LeastStranded")
    cluster.node("node-a", 3)
    cluster.node("node-b", 4)
    # node-a's third GPU would be stranded for the two known pairs, but two orders do not
    # tell node-a from node-b beyond their sampling error: the first node that fits takes
    # them (placement.choose.hedged; the mix deciding is tests/placement/test_hedged.py).
    for i in range(2):
        cluster.vm(f"pair-{i}", 2, created=T0 - timedelta(hours=2 - i))
    await cluster.settle()
    assert cluster.node_of("pair-0") == "node-a"
    assert cluster.node_of("pair-1") == "node-b"


async def test_a_node_that_lacks_the_cpu_is_passed_over(cluster: Cluster) -> None:
    cluster.gpu_class(policy="LeastStranded")
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    node_resources(cluster, "node-a", "8", "256Gi")
    node_resources(cluster, "node-b", "64", "256Gi")
    cluster.vm("hungry", 1, running=True)
    vm_requests(cluster, "hungry", "12", "8Gi")
    await cluster.settle()
    assert cluster.node_of("hungry") == "node-b"
