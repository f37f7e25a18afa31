"""Finalizers: every device carries one, so a deleted device stays until nothing runs on it."""

from __future__ import annotations

from gpu_binder.api.types import FINALIZER
from gpu_binder.binder.config import Config

from .cluster import Cluster


async def test_every_device_gets_the_finalizer(cluster: Cluster) -> None:
    names = cluster.node("node-a", 2)
    await cluster.settle()
    assert all(FINALIZER in cluster.device(n).metadata.finalizers for n in names)


async def test_finalizers_are_added_even_when_the_binder_is_disabled() -> None:
    cluster = Cluster(config=Config(enabled=False))
    cluster.gpu_class()
    names = cluster.node("node-a", 2)
    await cluster.settle()
    assert all(FINALIZER in cluster.device(n).metadata.finalizers for n in names)
    assert all(cluster.phase(n) is None for n in names), "disabled: nothing else is decided"
