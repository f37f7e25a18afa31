"""The one feed: a World is shown what the binder's informers would deliver of a cluster's
changes (cache.watched), whether the binder runs on an API server or in memory."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpu_binder.api.instancetype import ControllerRevision, instancetype_revision_object
from gpu_binder.api.kinds import Event, KubeVirt
from gpu_binder.api.kubevirt import Node
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    RECORD_CLOSED,
    RECORD_OPEN,
    RECORD_STATE_LABEL,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
    GPUUsageRecordSpec,
)
from gpu_binder.cache import WATCHED, World, feed, listed
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.builders import gpu_class, gpu_device, kubevirt_object, node_object

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KUBEVIRT = "kubevirt"
LEDGER = "gpu-binder-ledger"


def record(state: str, end: datetime | None = None) -> GPUUsageRecord:
    return GPUUsageRecord(
        metadata=ObjectMeta(name="r", namespace=LEDGER, labels={RECORD_STATE_LABEL: state}),
        spec=GPUUsageRecordSpec(namespace="t", vm="vm", device="gpu", start=T0, end=end),
    )


def revision(instancetype: bool) -> ControllerRevision:
    raw = instancetype_revision_object("rev", "t", instancetype="small")
    if not instancetype:
        raw["metadata"]["labels"] = {}
    return ControllerRevision.from_dict(raw)


def kubevirt(namespace: str) -> KubeVirt:
    return KubeVirt.from_dict(kubevirt_object(namespace=namespace))


def shown(*events: WatchEvent[Any]) -> list[tuple[str, str]]:
    return [(e.type, type(e.object).__name__) for e in feed(World(), events, KUBEVIRT)]


def test_an_open_record_is_shown_as_it_came() -> None:
    assert shown(WatchEvent("MODIFIED", record(RECORD_OPEN))) == [("MODIFIED", "GPUUsageRecord")]


def test_a_record_closed_is_shown_deleted_as_its_selected_watch_sends_it() -> None:
    world = World()
    feed(world, [WatchEvent("ADDED", record(RECORD_OPEN))], KUBEVIRT)
    closed = record(RECORD_CLOSED, end=T0)
    assert feed(world, [WatchEvent("MODIFIED", closed)], KUBEVIRT) == [
        WatchEvent("DELETED", closed)
    ]
    assert world.records == {}


def test_a_revision_of_no_instancetype_is_shown_deleted() -> None:
    assert shown(WatchEvent("ADDED", revision(instancetype=False))) == [
        ("DELETED", "ControllerRevision")
    ]


def test_a_kind_the_binder_does_not_watch_is_not_shown() -> None:
    event = Event.from_dict({"metadata": {"name": "e", "namespace": "t"}, "reason": "X"})
    assert Event not in WATCHED
    assert shown(WatchEvent("ADDED", event)) == []


def test_a_kubevirt_cr_outside_kubevirts_namespace_is_not_shown() -> None:
    assert shown(WatchEvent("ADDED", kubevirt("elsewhere"))) == []
    assert shown(WatchEvent("ADDED", kubevirt(KUBEVIRT))) == [("ADDED", "KubeVirt")]


def test_a_fresh_list_holds_the_selection_kind_by_kind_in_watched_order() -> None:
    objects: dict[type[Any], list[Any]] = {
        GPUDevice: [gpu_device("node-a", 0, "0x2330")],
        GPUClass: [gpu_class("h100", "nvidia.com/H100", "0x2330")],
        Node: [node_object("node-a", T0)],
        GPUUsageRecord: [record(RECORD_OPEN), record(RECORD_CLOSED, end=T0)],
        ControllerRevision: [revision(instancetype=False)],
        KubeVirt: [kubevirt("elsewhere"), kubevirt(KUBEVIRT)],
    }
    events = list(listed(lambda kind: objects.get(kind, []), KUBEVIRT))
    assert [(e.type, type(e.object).__name__) for e in events] == [
        ("ADDED", "GPUClass"),
        ("ADDED", "Node"),
        ("ADDED", "GPUDevice"),
        ("ADDED", "GPUUsageRecord"),
        ("ADDED", "KubeVirt"),
    ]
    assert events[3].object.metadata.labels[RECORD_STATE_LABEL] == RECORD_OPEN
    assert events[4].object.metadata.namespace == KUBEVIRT
