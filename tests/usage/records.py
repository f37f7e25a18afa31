"""Usage records and entries for the tests, at times counted in hours from T0."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUUsageRecord, GPUUsageRecordSpec, RecordKind, VMRef
from gpu_binder.binder import ledger
from gpu_binder.usage.ledger import DEFAULT_LEDGER, Entry, Period

T0 = datetime(2026, 11, 1, tzinfo=UTC)
LEDGER = DEFAULT_LEDGER


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def period(start: float, end: float) -> Period:
    return Period(at(start), at(end))


def entry(
    start: float,
    end: float | None,
    *,
    namespace: str = "tenant-a",
    vm: str = "vm-1",
    class_name: str = "h100",
    node: str = "node-a",
    name: str = "r",
    kind: str = "attached",
    created: float | None = None,
) -> Entry:
    return Entry(
        namespace=namespace,
        name=name,
        vm=vm,
        class_name=class_name,
        node=node,
        start=at(start),
        end=None if end is None else at(end),
        kind="reserved" if kind == "reserved" else "attached",
        created=None if created is None else at(created),
    )


def record(
    name: str,
    start: datetime,
    end: datetime | None = None,
    *,
    namespace: str = "tenant-a",
    vm: str = "vm-1",
    class_name: str = "h100",
    node: str = "node-a",
    kind: RecordKind = RecordKind.ATTACHED,
    created: datetime | None = None,
) -> GPUUsageRecord:
    """A record of the ledger (in its namespace, naming its tenant), as the binder writes it."""
    spec = GPUUsageRecordSpec(
        kind=kind,
        namespace=namespace,
        vm=vm,
        vmi=VMRef(name=vm, uid=f"uid-{vm}") if kind == RecordKind.ATTACHED else None,
        device=f"{node}-0000-3b-00-0",
        class_name=class_name,
        node_name=node,
        start=start,
        end=end,
    )
    labels = ledger.labels_of(spec)
    meta = ObjectMeta(name=name, namespace=LEDGER, labels=labels, creation_timestamp=created)
    return GPUUsageRecord(metadata=meta, spec=spec)


def copy(rec: GPUUsageRecord) -> GPUUsageRecord:
    """The tenant's copy of a record, in its namespace."""
    found = ledger.copy_of(rec, LEDGER, None)
    assert found is not None
    return found
