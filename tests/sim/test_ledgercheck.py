"""Invariant 12: the ledger's records against the sim's truth, interval by interval."""

from __future__ import annotations

from datetime import timedelta

from gpu_binder.api.types import GPUUsageRecord, RecordKind
from gpu_binder.sim.ledgercheck import compare
from gpu_binder.sim.truth import Stretch

from .builders import T0

UID = "uid-a"


def at(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def attached(start: float, end: float | None, device: str = "d1") -> Stretch:
    return Stretch(
        RecordKind.ATTACHED,
        device,
        UID,
        "t",
        "h100",
        T0 + at(start),
        None if end is None else T0 + at(end),
    )


def reserved(start: float, end: float | None, device: str = "d1") -> Stretch:
    return Stretch(
        RecordKind.RESERVED,
        device,
        "t/a",
        "t",
        "h100",
        T0 + at(start),
        None if end is None else T0 + at(end),
    )


def record(
    kind: RecordKind, start: float, end: float | None, device: str = "d1", name: str = ""
) -> GPUUsageRecord:
    spec: dict[str, object] = {
        "kind": kind,
        "namespace": "t",
        "vm": "a",
        "vm_uid": "vm-uid",
        "device": device,
        "className": "h100",
        "start": T0 + at(start),
        "end": None if end is None else T0 + at(end),
    }
    if kind == RecordKind.ATTACHED:
        spec["vmi"] = {"name": "a", "uid": UID}
    return GPUUsageRecord.model_validate(
        {
            "metadata": {"name": name or f"r-{kind}-{device}-{start}", "namespace": "ledger"},
            "spec": spec,
        }
    )


def test_a_ledger_billing_what_happened_is_within_tolerance() -> None:
    truth = [reserved(0, 10), attached(10, 100), reserved(100, None)]
    records = [
        record(RecordKind.RESERVED, 0, 10),
        record(RecordKind.ATTACHED, 10, 100),
        record(RecordKind.RESERVED, 100, None),
    ]
    result = compare(truth, records, T0 + at(130))
    assert result.violations == []
    assert result.figures() == {
        "truth_gpu_seconds": {"attached": 90.0, "reserved": 40.0},
        "ledger_gpu_seconds": {"attached": 90.0, "reserved": 40.0},
        "intervals": 3,
        "worst_interval_seconds": 0.0,
        "worst_namespace_class_seconds": 0.0,
        "beyond_tolerance": 0,
    }


def test_a_record_closed_five_seconds_late_is_one_violation_of_12() -> None:
    result = compare([attached(10, 100)], [record(RecordKind.ATTACHED, 10, 105)], T0 + at(200))
    assert len(result.violations) == 1
    assert result.violations[0].startswith("(12) Attached time of d1")
    assert result.worst_seconds == 5.0


def test_a_second_off_is_within_tolerance() -> None:
    result = compare([attached(10, 100)], [record(RecordKind.ATTACHED, 9, 100)], T0 + at(200))
    assert result.violations == []
    assert result.worst_seconds == 1.0


def test_a_shifted_record_is_off_by_what_it_bills_wrongly_at_both_ends() -> None:
    result = compare([attached(10, 100)], [record(RecordKind.ATTACHED, 0, 90)], T0 + at(200))
    assert result.worst_seconds == 20.0


def test_an_end_off_by_minutes_is_a_violation_whether_a_binder_saw_it_or_not() -> None:
    # The API server's stamps say every end to the second, also one that came during an
    # outage: a node's clock minutes off excuses nothing.
    result = compare([attached(10, 100)], [record(RecordKind.ATTACHED, 10, 40)], T0 + at(200))
    assert len(result.violations) == 1


def test_an_interval_missed_whole_is_a_violation() -> None:
    result = compare([reserved(100, 106)], [], T0 + at(200))
    assert len(result.violations) == 1


def test_an_interval_of_two_seconds_missed_whole_is_within_tolerance() -> None:
    # As if billed for none of it at an instant inside it: each end a second off.
    result = compare([reserved(100, 102)], [], T0 + at(200))
    assert result.violations == []


def test_an_interval_the_ledger_missed_is_off_by_its_length() -> None:
    result = compare([reserved(100, 106)], [], T0 + at(200))
    assert result.worst_seconds == 6.0
    assert "ledger nothing" in result.violations[0]


def test_a_record_of_time_that_never_happened_is_off_by_its_length() -> None:
    result = compare([], [record(RecordKind.RESERVED, 0, 30)], T0 + at(200))
    assert result.worst_seconds == 30.0
    assert "truth nothing" in result.violations[0]


def test_records_that_split_one_interval_bill_it_without_a_difference() -> None:
    records = [
        record(RecordKind.RESERVED, 0, 40, name="r1"),
        record(RecordKind.RESERVED, 40, 100, name="r2"),
    ]
    result = compare([reserved(0, 100)], records, T0 + at(200))
    assert result.violations == []
    assert result.intervals == 1


def test_an_open_record_counts_to_now_as_an_open_interval_does() -> None:
    result = compare([attached(10, None)], [record(RecordKind.ATTACHED, 10, 50)], T0 + at(60))
    assert result.worst_seconds == 10.0


def test_time_billed_to_another_kind_is_off_in_both() -> None:
    result = compare([attached(0, 10)], [record(RecordKind.RESERVED, 0, 10)], T0 + at(60))
    assert len(result.violations) == 2


def test_a_tenants_copy_is_not_billed_again() -> None:
    copy = record(RecordKind.ATTACHED, 10, 100)
    copy = copy.model_copy(
        update={
            "metadata": copy.metadata.model_copy(
                update={"namespace": "t", "labels": {"gpu.cozystack.io/copy-of": "ledger"}}
            )
        }
    )
    result = compare([attached(10, 100)], [record(RecordKind.ATTACHED, 10, 100), copy], T0)
    assert result.ledger_seconds["attached"] == 90.0
