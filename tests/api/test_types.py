"""The models read the API's camelCase objects and write back exactly what they read."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from gpu_binder.api.meta import DURATION_PATTERN, parse_duration
from gpu_binder.api.types import (
    GPUBindRequest,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
    Health,
    Phase,
    RequestPhase,
    device_name,
    usage_record_name,
)

API_VERSION = "gpu.cozystack.io/v1alpha1"


def meta(name: str, namespace: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"team": "ml"},
        "annotations": {},
        "finalizers": [],
        "ownerReferences": [],
        **extra,
    }


CONDITION: dict[str, Any] = {
    "type": "Ready",
    "status": "True",
    "reason": "Matched",
    "message": "8 devices",
    "lastTransitionTime": "2024-05-01T10:00:05Z",
    "observedGeneration": 3,
}

GPU_CLASS: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "GPUClass",
    "metadata": meta("h100"),
    "spec": {
        "resourceName": "nvidia.com/GH100_H100_SXM5_80GB",
        "match": {
            "vendorID": "0x10de",
            "deviceIDs": ["0x2330", "0x2331"],
            "nodeSelector": {"gpu": "h100"},
        },
        "placement": {"policy": "Spread", "topology": "NVLink"},
        "reservation": {"releaseAfterStopped": "1h30m"},
        "cleaning": "None",
        "pinning": "Node",
        "vfioBinding": "Agent",
    },
    "status": {
        "devices": 16,
        "available": 8,
        "bound": 6,
        "attached": 4,
        "lost": 1,
        "cleaning": 1,
        "largestFreeSet": 8,
        "conditions": [CONDITION],
        "observedGeneration": 3,
    },
}

GPU_DEVICE: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "GPUDevice",
    "metadata": meta("node-a-0000-3b-00-0", finalizers=["gpu.cozystack.io/device"]),
    "spec": {
        "nodeName": "node-a",
        "pciAddress": "0000:3b:00.0",
        "slot": 3,
        "vendorID": "0x10de",
        "deviceID": "0x2330",
        "model": "H100 SXM5 80GB",
        "numaNode": 0,
        "iommuGroup": 17,
        "nvlinkDomain": "nvl-0",
        "driver": "vfio-pci",
        "health": "Unhealthy",
        "healthMessage": "XID 79",
        "lastReset": "2024-05-01T09:00:00Z",
        "lastResetFor": "2024-05-01T08:00:00Z",
        "unschedulable": True,
    },
    "status": {
        "className": "h100",
        "phase": "Attached",
        "binding": {
            "vm": {"namespace": "tenant", "name": "vm1", "uid": "uid-vm1"},
            "boundAt": "2024-05-01T10:01:00Z",
            "reason": "Rebind",
        },
        "attachment": {
            "vmi": {"namespace": "tenant", "name": "vm1", "uid": "uid-vmi1"},
            "since": "2024-05-01T10:02:00Z",
        },
        "detachedAt": "2024-05-01T09:30:00Z",
        "lostSince": "2024-05-01T10:03:00Z",
        "lostReason": "node not ready",
        "releasedAt": "2024-05-01T08:00:00Z",
        "conditions": [CONDITION],
        # Derived from binding (GPUDeviceStatus.vm), for the printer column.
        "vm": "tenant/vm1",
    },
}

GPU_BIND_REQUEST: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "GPUBindRequest",
    "metadata": meta(
        "vm1-abc",
        "tenant",
        ownerReferences=[
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "name": "vm1",
                "uid": "uid-vm1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    ),
    "spec": {
        "vm": {"name": "vm1", "uid": "uid-vm1"},
        "vmi": {"name": "vm1"},
        "requests": [{"className": "h100", "count": 2}, {"className": "l40", "count": 1}],
    },
    "status": {
        "phase": "Bound",
        "nodeName": "node-a",
        "devices": ["node-a-0000-3b-00-0", "node-a-0000-3c-00-0"],
        "message": "",
        "answeredAt": "2024-05-01T10:00:01Z",
    },
}

GPU_USAGE_RECORD: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "GPUUsageRecord",
    "metadata": meta("uid-vmi1-node-a-0000-3b-00-0", "gpu-binder-ledger"),
    "spec": {
        "kind": "Attached",
        "namespace": "tenant",
        "vm": "vm1",
        "vmUid": "uid-vm1",
        "vmi": {"name": "vm1", "uid": "uid-vmi1"},
        "device": "node-a-0000-3b-00-0",
        "className": "h100",
        "nodeName": "node-a",
        "start": "2024-05-01T10:02:00Z",
        "end": "2024-05-01T11:02:00Z",
    },
}

KINDS: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (GPUClass, GPU_CLASS),
    (GPUDevice, GPU_DEVICE),
    (GPUBindRequest, GPU_BIND_REQUEST),
    (GPUUsageRecord, GPU_USAGE_RECORD),
]


@pytest.mark.parametrize(("model", "wire"), KINDS, ids=lambda k: getattr(k, "__name__", ""))
def test_every_kind_round_trips_from_the_api_and_back(
    model: type[BaseModel], wire: dict[str, Any]
) -> None:
    obj = model.model_validate(wire)
    assert obj.to_dict() == wire  # type: ignore[attr-defined]


def test_explicit_aliases_keep_the_apis_spelling_of_ids() -> None:
    cls = GPUClass.model_validate(GPU_CLASS)
    assert cls.spec.match.vendor_id == "0x10de"
    assert cls.spec.match.device_ids == ("0x2330", "0x2331")
    device = GPUDevice.model_validate(GPU_DEVICE)
    assert device.spec.device_id == "0x2330"
    assert "deviceID" in device.to_dict()["spec"]
    assert "deviceIDs" in cls.to_dict()["spec"]["match"]


def test_parsed_values_are_typed() -> None:
    device = GPUDevice.model_validate(GPU_DEVICE)
    assert device.status.phase is Phase.ATTACHED
    assert device.spec.health is Health.UNHEALTHY
    assert device.status.binding is not None
    assert device.status.binding.vm.key == "tenant/vm1"
    assert device.spec.last_reset is not None and device.spec.last_reset.tzinfo is not None
    request = GPUBindRequest.model_validate(GPU_BIND_REQUEST)
    assert request.status.phase is RequestPhase.BOUND
    assert request.metadata.owner("VirtualMachine") is not None
    assert GPUClass.model_validate(GPU_CLASS).spec.release_after == timedelta(hours=1.5)


def test_a_minimal_object_gets_the_models_defaults_and_writes_no_nulls() -> None:
    device = GPUDevice.model_validate(
        {
            "metadata": {"name": "n-0000-3b-00-0"},
            "spec": {"nodeName": "n", "pciAddress": "0000:3b:00.0", "deviceID": "0x2330"},
        }
    )
    assert device.spec.vendor_id == "0x10de"
    assert device.status.phase is None
    wire = device.to_dict()
    assert wire["apiVersion"] == API_VERSION and wire["kind"] == "GPUDevice"
    assert "phase" not in wire["status"] and "slot" not in wire["spec"]
    cls = GPUClass.model_validate({"metadata": {"name": "c"}, "spec": {"resourceName": "r"}})
    assert cls.spec.placement.policy == "LeastStranded"
    assert cls.spec.cleaning == "Reset"
    assert cls.spec.pinning == "Device"
    assert cls.spec.release_after is None


def test_open_usage_record_has_no_end() -> None:
    wire = {**GPU_USAGE_RECORD, "spec": {**GPU_USAGE_RECORD["spec"]}}
    del wire["spec"]["end"]
    record = GPUUsageRecord.model_validate(wire)
    assert record.spec.end is None
    assert "end" not in record.to_dict()["spec"]


def test_unknown_fields_are_ignored_like_the_api_servers_pruning() -> None:
    wire = {**GPU_CLASS, "spec": {**GPU_CLASS["spec"], "future": True}}
    assert "future" not in GPUClass.model_validate(wire).to_dict()["spec"]


def test_models_are_immutable() -> None:
    cls = GPUClass.model_validate(GPU_CLASS)
    with pytest.raises(ValidationError):
        cls.spec.resource_name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"pciAddress": "0000:3B:00.0"}, "pciAddress"),
        ({"pciAddress": "3b:00.0"}, "pciAddress"),
        ({"deviceID": "2330"}, "deviceID"),
        ({"nodeName": ""}, "nodeName"),
        ({"slot": -1}, "slot"),
        ({"health": "Sick"}, "health"),
    ],
)
def test_a_device_spec_the_crd_refuses_is_refused_here_too(
    spec: dict[str, Any], field: str
) -> None:
    wire = {**GPU_DEVICE, "spec": {**GPU_DEVICE["spec"], **spec}}
    with pytest.raises(ValidationError) as error:
        GPUDevice.model_validate(wire)
    assert field in str(error.value)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"requests": []}, "requests"),
        ({"requests": [{"className": "h100", "count": 0}]}, "count"),
        ({"requests": [{"className": "h100", "count": -1}]}, "count"),
        ({"vm": {"name": ""}}, "name"),
    ],
)
def test_a_bind_request_the_crd_refuses_is_refused_here_too(
    spec: dict[str, Any], field: str
) -> None:
    wire = {**GPU_BIND_REQUEST, "spec": {**GPU_BIND_REQUEST["spec"], **spec}}
    with pytest.raises(ValidationError) as error:
        GPUBindRequest.model_validate(wire)
    assert field in str(error.value)


@pytest.mark.parametrize(
    "match",
    [{"deviceIDs": ["2330"]}, {"deviceIDs": ["0x2330"] * 65}, {"vendorID": "10de"}],
)
def test_a_class_match_the_crd_refuses_is_refused_here_too(match: dict[str, Any]) -> None:
    wire = {**GPU_CLASS, "spec": {**GPU_CLASS["spec"], "match": match}}
    with pytest.raises(ValidationError):
        GPUClass.model_validate(wire)


def test_a_class_refuses_a_duration_that_is_not_go_form() -> None:
    wire = {
        **GPU_CLASS,
        "spec": {**GPU_CLASS["spec"], "reservation": {"releaseAfterStopped": "1d"}},
    }
    with pytest.raises(ValidationError):
        GPUClass.model_validate(wire)


# --- parse_duration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2h45m30s", timedelta(hours=2, minutes=45, seconds=30)),
        ("500ms", timedelta(milliseconds=500)),
        ("1m500ms", timedelta(minutes=1, milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        ("0s", timedelta(0)),
        ("24h", timedelta(days=1)),
    ],
)
def test_parse_duration_accepts_go_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "5", "5 minutes", "1d", "-5s", "1h 30m", "ms", "h", "1H", "1.s", "30s "]
)
def test_parse_duration_refuses_what_is_not_a_go_duration_and_says_how_to_write_one(
    text: str,
) -> None:
    with pytest.raises(ValueError, match=r"invalid duration .*use Go form such as 30s, 5m"):
        parse_duration(text)


@pytest.mark.parametrize(
    "text", ["90s", "1h30m", "500ms", "1.5h", "", "5", "1d", "-5s", "1h 30m", "1.s", "ms"]
)
def test_the_crd_pattern_and_the_parser_agree(text: str) -> None:
    """What the API server lets into releaseAfterStopped, the binder can parse, and only that."""
    accepted_by_schema = re.fullmatch(DURATION_PATTERN.strip("^$"), text) is not None
    try:
        parse_duration(text)
        parsed = True
    except ValueError:
        parsed = False
    assert parsed == accepted_by_schema


# --- Names ------------------------------------------------------------------------------


def test_device_name_is_the_node_and_pci_address_with_dashes() -> None:
    assert device_name("node-a", "0000:3b:00.0") == "node-a-0000-3b-00-0"
    assert device_name("gpu-7.rack-2", "0001:af:1f.7") == "gpu-7.rack-2-0001-af-1f-7"


def test_device_name_is_a_valid_object_name() -> None:
    name = device_name("node-a", "0000:3b:00.0")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name)


def test_device_names_of_different_functions_differ() -> None:
    names = {device_name("n", f"0000:3b:00.{f}") for f in range(8)}
    assert len(names) == 8


def test_usage_record_name_is_stable_so_opening_twice_is_one_record() -> None:
    uid = "6f1c2d3e-0000-4000-8000-123456789abc"
    first = usage_record_name(uid, "node-a-0000-3b-00-0")
    assert first == usage_record_name(uid, "node-a-0000-3b-00-0")
    assert first != usage_record_name(uid, "node-a-0000-3c-00-0")
    assert len(usage_record_name(uid, "x" * 300)) <= 253


def test_devices_of_a_long_node_name_get_records_of_their_own() -> None:
    uid = "6f1c2d3e-0000-4000-8000-123456789abc"
    node = "n" * 220
    names = {usage_record_name(uid, f"{node}-0000-3b-00-{f}") for f in range(8)}
    assert len(names) == 8
    assert all(len(n) <= 253 and n[-1].isalnum() for n in names)


def test_a_devices_vm_is_its_binding_as_namespace_name_and_never_read_from_the_api() -> None:
    device = GPUDevice.model_validate(
        {**GPU_DEVICE, "status": {**GPU_DEVICE["status"], "vm": "someone/else"}}
    )
    assert device.status.vm == "tenant/vm1"
    unbound = device.status.model_copy(update={"binding": None})
    assert unbound.vm == "" and "vm" in unbound.to_dict()
