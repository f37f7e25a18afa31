"""When a VMI ended, as its object tells: the API server's stamp of the write of its
final phase (managedFields) bounds the writer's own, which a skewed clock moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.meta import field_written_at

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
PHASE = {"f:status": {"f:phase": {}}}


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def entry(manager: str, at: datetime, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Update",
        "time": iso(at),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields if fields is not None else {},
    }


def vmi(
    phase: str, finished: datetime | None, entries: list[dict[str, Any]] | None
) -> VirtualMachineInstance:
    stamps = [{"phase": "Running", "phaseTransitionTimestamp": iso(T0)}]
    if finished is not None:
        stamps.append({"phase": phase, "phaseTransitionTimestamp": iso(finished)})
    meta: dict[str, Any] = {"name": "vm", "namespace": "t", "uid": "u1"}
    if entries is not None:
        meta["managedFields"] = entries
    return VirtualMachineInstance.from_dict(
        {"metadata": meta, "status": {"phase": phase, "phaseTransitionTimestamps": stamps}}
    )


def test_the_field_is_written_when_the_entry_owning_it_says() -> None:
    meta = {
        "managedFields": [
            entry("virt-controller", T0 + timedelta(seconds=90)),
            entry("virt-handler", T0 + timedelta(seconds=60), PHASE),
        ]
    }
    assert field_written_at(meta, ("status", "phase")) == T0 + timedelta(seconds=60)


def test_no_entry_owning_the_field_tells_nothing() -> None:
    meta = {"managedFields": [entry("virt-controller", T0)]}
    assert field_written_at(meta, ("status", "phase")) is None


def test_malformed_managed_fields_tell_nothing_and_raise_nothing() -> None:
    for bad in ("x", [1, None], [{"fieldsV1": PHASE, "time": "yesterday"}], [{"fieldsV1": 3}]):
        assert field_written_at({"managedFields": bad}, ("status", "phase")) is None


def test_a_finish_stamped_by_a_clock_ten_minutes_behind_is_taken_at_the_servers_second() -> None:
    stored = T0 + timedelta(seconds=300)
    ended = vmi("Succeeded", stored - timedelta(minutes=10), [entry("virt-handler", stored, PHASE)])
    assert ended.finish == stored


def test_a_finish_stamped_by_a_clock_ahead_is_taken_at_the_end_of_the_servers_second() -> None:
    stored = T0 + timedelta(seconds=300)
    ended = vmi("Failed", stored + timedelta(minutes=10), [entry("virt-handler", stored, PHASE)])
    assert ended.finish == stored + timedelta(seconds=1)


def test_a_finish_inside_the_servers_second_is_kept_to_the_millisecond() -> None:
    stored = T0 + timedelta(seconds=300)
    inside = stored + timedelta(milliseconds=400)
    ended = vmi("Succeeded", inside, [entry("virt-handler", stored, PHASE)])
    assert ended.finish == inside


def test_without_managed_fields_the_writers_stamp_stands() -> None:
    finished = T0 + timedelta(seconds=42)
    assert vmi("Succeeded", finished, None).finish == finished


def test_a_vmi_still_running_has_no_finish_whatever_its_stamps_say() -> None:
    forged = vmi("Running", T0, [entry("virt-handler", T0, PHASE)])
    raw = {**forged.raw}
    raw["status"] = {
        **raw["status"],
        "phaseTransitionTimestamps": [{"phase": "Succeeded", "phaseTransitionTimestamp": iso(T0)}],
    }
    assert VirtualMachineInstance.from_dict(raw).finish is None
