"""What the binder watches, and the one loop that shows a World its events.

A binder's informers (kube.manager) list and watch each kind of WATCHED, with its selector
(SELECTORS) and in its namespace (`namespace_of`); the API server applies the selection:
an object outside it never arrives, one that leaves it (a record closed, relabelled)
arrives as DELETED. Clusters in memory (sim, tests, bench) see every change of every
object instead; `feed` and `listed` show a World what those informers would, so every
World, real or in memory, is fed by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gpu_binder.api.instancetype import INSTANCETYPE_REVISIONS, ControllerRevision
from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.api.quota import ResourceQuota
from gpu_binder.api.types import (
    OPEN_RECORDS,
    GPUBindRequest,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
    watched_record,
)
from gpu_binder.cache.launchers import LAUNCHER_PODS, is_launcher_pod
from gpu_binder.cache.world import World
from gpu_binder.client.interface import WatchEvent

# Every kind the binder's world caches, in the order a fresh binder lists them: classes and
# nodes before the devices classified by them, launcher pods before the VMIs they may
# keep in use (cache.launchers). KubeVirt's CR only for the settings step; ResourceQuotas
# for the GPU quotas (binder.quota).
WATCHED: tuple[type[Any], ...] = (
    GPUClass,
    Node,
    GPUDevice,
    VirtualMachine,
    Pod,
    VirtualMachineInstance,
    GPUBindRequest,
    GPUUsageRecord,
    KubeVirt,
    ControllerRevision,
    ResourceQuota,
)

# The label selector a kind in WATCHED is listed and watched with: only open usage records,
# only the revisions of instancetypes, only KubeVirt's pods of VMIs.
SELECTORS: dict[type[Any], str] = {
    GPUUsageRecord: OPEN_RECORDS,
    ControllerRevision: INSTANCETYPE_REVISIONS,
    Pod: LAUNCHER_PODS,
}


def namespace_of(kind: type[Any], kubevirt_namespace: str) -> str | None:
    """The namespace a kind of WATCHED is watched in: KubeVirt's CR in the one KubeVirt
    runs in (the binder reads no other, binder.kubevirtcr), every other kind in all (None)."""
    return kubevirt_namespace if kind is KubeVirt else None


def _in_selection(obj: Any) -> bool:
    """Whether obj is in its kind's selection (SELECTORS), by the predicates of api/ that
    World.apply also keeps its cache by (the binder's own writes reach it unselected)."""
    if isinstance(obj, GPUUsageRecord):
        return watched_record(obj)
    if isinstance(obj, ControllerRevision):
        return obj.is_instancetype
    if isinstance(obj, Pod):
        return is_launcher_pod(obj)
    return True


def _selection_of(kind: type[Any]) -> Callable[[Any], bool] | None:
    """The predicate of `_in_selection` for objects of one kind (None: all of them)."""
    if issubclass(kind, GPUUsageRecord):
        return watched_record
    if issubclass(kind, ControllerRevision):
        return _is_instancetype
    if issubclass(kind, Pod):
        return is_launcher_pod
    return None


def _is_instancetype(revision: ControllerRevision) -> bool:
    return revision.is_instancetype


def _watched(obj: Any, kubevirt_namespace: str) -> bool:
    """Whether the binder watches obj's kind where obj is."""
    if not isinstance(obj, WATCHED):
        return False
    namespace = namespace_of(type(obj), kubevirt_namespace)
    return namespace is None or obj.metadata.namespace == namespace


def selected(event: WatchEvent[Any], kubevirt_namespace: str) -> WatchEvent[Any] | None:
    """The event as the binder's watch of its kind delivers it: None where the binder
    watches no such object; an object outside its kind's selection arrives as DELETED, as
    the API server sends one that leaves it (a World holds none that never entered it,
    so it takes the deletion of one of those as a no-op)."""
    if not _watched(event.object, kubevirt_namespace):
        return None
    if event.type != "DELETED" and not _in_selection(event.object):
        return WatchEvent("DELETED", event.object)
    return event


def feed(
    world: World, events: Iterable[WatchEvent[Any]], kubevirt_namespace: str
) -> list[WatchEvent[Any]]:
    """Show the world each event as the binder's informers deliver it (`selected`), in
    order; returns the events it was shown."""
    shown = []
    for event in events:
        delivered = selected(event, kubevirt_namespace)
        if delivered is not None:
            world.apply(delivered)
            shown.append(delivered)
    return shown


def listed(
    objects: Callable[[type[Any]], Iterable[Any]], kubevirt_namespace: str
) -> Iterator[WatchEvent[Any]]:
    """A fresh binder's first list, as ADDED events: kind by kind in WATCHED's order, the
    objects of each (`objects(kind)`) its informer lists, in its namespace and selection."""
    for kind in WATCHED:
        # The kind's namespace and selection once, not per object: a relist walks every
        # stored object (closed records and ended pods too).
        namespace = namespace_of(kind, kubevirt_namespace)
        selects = _selection_of(kind)
        for obj in objects(kind):
            if (namespace is None or obj.metadata.namespace == namespace) and (
                selects is None or selects(obj)
            ):
                yield WatchEvent("ADDED", obj)


def fill(
    world: World, objects: Callable[[type[Any]], Iterable[Any]], kubevirt_namespace: str
) -> None:
    """Show a fresh world its first list (`listed`): its events are as the informers
    deliver them already, so they skip `feed`'s selection."""
    for event in listed(objects, kubevirt_namespace):
        world.apply(event)
