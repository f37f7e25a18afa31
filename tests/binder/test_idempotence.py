"""A pass over an unchanged world writes nothing (DESIGN §2.7)."""

from __future__ import annotations

from .cluster import Cluster
from .test_settings import install_kubevirt


async def busy(cluster: Cluster) -> None:
    """A world with every phase in it: running, stopped, cleaning, lost, degraded, deleted."""
    install_kubevirt(cluster)
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.node("node-c", 4)
    cluster.vm("running", 2, running=True)
    cluster.vm("stopped", 3)
    cluster.vm("doomed", 1)
    cluster.vm("too-big", 9)
    await cluster.settle()
    cluster.start("running")
    await cluster.delete_vm("doomed")
    await cluster.settle()
    cluster.set_health(cluster.free_on("node-b")[0], False)
    cluster.serve("node-c", [0, 1, 2])
    await cluster.delete_device(cluster.set_of("running")[0])
    cluster.start("adhoc", node="node-a", devices=(), owned=False, gpus=1)
    await cluster.settle()
    await cluster.settle_after(minutes=5)


async def test_a_pass_over_an_unchanged_world_writes_nothing(cluster: Cluster) -> None:
    await busy(cluster)
    before = cluster.client.writes
    result = await cluster.run()
    assert result.writes == 0
    assert cluster.client.writes == before


async def test_a_resync_with_no_grace_expiring_writes_nothing(cluster: Cluster) -> None:
    await busy(cluster)
    before = cluster.client.writes
    for _ in range(3):
        cluster.clock.advance(seconds=30)
        await cluster.run()
    assert cluster.client.writes == before


async def test_a_restarted_binder_writes_nothing_over_an_unchanged_world(
    cluster: Cluster,
) -> None:
    await busy(cluster)
    cluster.restart()
    await cluster.settle()  # the new binder rediscovers what only memory held
    before = cluster.client.writes
    await cluster.run()
    assert cluster.client.writes == before


async def test_the_requests_pass_with_no_pending_request_writes_nothing(
    cluster: Cluster,
) -> None:
    await busy(cluster)
    before = cluster.client.writes
    await cluster.answer_requests()
    assert cluster.client.writes == before
