"""Usage records and entries for the tests, at times counted in hours from T0."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUUsageRecord, GPUUsageRecordSpec, VMRef
from gpu_binder.usage.ledger import Entry, Period

T0 = datetime(2026, 11, 1, tzinfo=UTC)


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
) -> Entry:
    return Entry(
        namespace=namespace,
        name=name,
        vm=vm,
        class_name=class_name,
        node=node,
        start=at(start),
        end=None if end is None else at(end),
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
) -> GPUUsageRecord:
    return GPUUsageRecord(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=GPUUsageRecordSpec(
            vm=vm,
            vmi=VMRef(name=vm, uid=f"uid-{vm}"),
            device=f"{node}-0000-3b-00-0",
            class_name=class_name,
            node_name=node,
            start=start,
            end=end,
        ),
    )
