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


async def test_a_small_order_fills_the_gap_no_other_order_could(cluster: Cluster) -> None:
    cluster.gpu_class(policy="LeastStranded")
    cluster.node("node-a", 3)
    cluster.node("node-b", 4)
    # Known orders ask for 2 GPUs: node-a's third GPU would be stranded by a pair, so the
    # 1-GPU order takes it there, and node-b keeps its two pairs.
    for i in range(2):
        cluster.vm(f"pair-{i}", 2, created=T0 - timedelta(hours=2 - i))
    await cluster.settle()
    assert cluster.node_of("pair-0") == cluster.node_of("pair-1") == "node-b"
    cluster.vm("one", 1)
    await cluster.settle()
    assert cluster.node_of("one") == "node-a"


async def test_it_keeps_cpu_for_the_gpus_a_node_has_left(cluster: Cluster) -> None:
    cluster.gpu_class(policy="LeastStranded")
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    node_resources(cluster, "node-a", "16", "256Gi")
    node_resources(cluster, "node-b", "64", "256Gi")
    for i in range(3):
        cluster.vm(f"known-{i}", 1, created=T0 - timedelta(hours=3))
        vm_requests(cluster, f"known-{i}", "8", "8Gi")
    cluster.vm("hungry", 1, running=True, created=T0 - timedelta(hours=4))
    vm_requests(cluster, "hungry", "12", "8Gi")
    await cluster.settle()
    # On node-a the hungry VM would leave 3 GPUs with 4 cores: no known order fits there.
    assert cluster.node_of("hungry") == "node-b"
