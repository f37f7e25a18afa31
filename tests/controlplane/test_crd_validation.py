"""The CRDs installed on a real API server refuse bad objects, saying what is wrong.

Every field of gpu-binder's kinds is bounded and typed (issue 11): the table below holds
bad values, each refused with a message that names the field. A forged GPUDevice (a
compromised node agent's) cannot carry a 1 MB model, slot 2^62 or a negative NUMA node; a
class cannot take a slot resource name or a reservation that overflows the binder; bind
requests and records cannot carry unbounded names or counts. Status cases go through the
status subresource, where the binder writes them.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import pytest
from realcluster import namespace, uid

from gpu_binder.client.errors import Invalid
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient

pytestmark = pytest.mark.controlplane

API = "/apis/gpu.cozystack.io/v1alpha1"


async def refused(admin: KubeClient, method: str, path: str, body: dict[str, Any]) -> str:
    with pytest.raises(Invalid) as e:
        await admin.request(method, path, body)
    return e.value.message


async def test_a_device_with_a_malformed_pci_address_is_refused(admin: KubeClient) -> None:
    device = {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUDevice",
        "metadata": {"name": f"bad-{uid()}"},
        "spec": {"nodeName": "n", "pciAddress": "3b:00.0", "deviceID": "0x2330"},
    }
    message = await refused(admin, "POST", f"{API}/gpudevices", device)
    assert "spec.pciAddress" in message and "should match" in message


async def test_a_class_without_a_resource_name_is_refused(admin: KubeClient) -> None:
    cls = {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": f"bad-{uid()}"},
        "spec": {"match": {"vendorID": "0x10de", "deviceIDs": ["0x2330"]}},
    }
    message = await refused(admin, "POST", f"{API}/gpuclasses", cls)
    assert "spec.resourceName: Required value" in message


async def test_a_bind_request_for_a_negative_count_is_refused(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns = namespace(control_plane)
    request = {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUBindRequest",
        "metadata": {"name": "r"},
        "spec": {
            "vm": {"name": "vm"},
            "vmi": {"name": "vm"},
            "requests": [{"className": "h100", "count": -2}],
        },
    }
    message = await refused(admin, "POST", f"{API}/namespaces/{ns}/gpubindrequests", request)
    assert "spec.requests[0].count" in message and "greater than or equal to 1" in message


async def test_a_closed_usage_record_cannot_be_edited(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns = namespace(control_plane)
    path = f"{API}/namespaces/{ns}/gpuusagerecords"
    record = {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUUsageRecord",
        "metadata": {"name": "r"},
        "spec": {
            "vm": "vm",
            "vmi": {"name": "vm", "uid": "u1"},
            "device": "node-a-0000-3b-00-0",
            "start": "2026-01-01T00:00:00Z",
            "end": "2026-01-01T01:00:00Z",
        },
    }
    stored = await admin.request("POST", path, record)
    stored["spec"]["end"] = "2026-01-01T02:00:00Z"

    message = await refused(admin, "PUT", f"{path}/r", stored)

    assert "closed" in message.lower()


# --- every field bounded ----------------------------------------------------------

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T01:00:00Z"


def base(kind: str) -> dict[str, Any]:
    """A valid object of kind, which each case spoils in one field."""
    spec: dict[str, Any] = {
        "GPUClass": {
            "resourceName": "example.com/GPU_bounds",
            # A device ID no test's GPUs have: the session's binders never see it match.
            "match": {"vendorID": "0x10de", "deviceIDs": ["0xfffe"]},
        },
        "GPUDevice": {"nodeName": "node-a", "pciAddress": "0000:3b:00.0", "deviceID": "0xfffe"},
        "GPUBindRequest": {
            "vm": {"name": "vm", "uid": "u1"},
            "vmi": {"name": "vm"},
            "requests": [{"className": "h100", "count": 1, "alternatives": ["a100"]}],
        },
        "GPUUsageRecord": {
            "vm": "vm",
            "vmi": {"name": "vm", "uid": "u1"},
            "device": "node-a-0000-3b-00-0",
            "className": "h100",
            "nodeName": "node-a",
            "start": T0,
        },
    }[kind]
    return {"apiVersion": "gpu.cozystack.io/v1alpha1", "kind": kind, "spec": spec}


DEVICE_STATUS = {
    "className": "h100",
    "phase": "Bound",
    "binding": {
        "vm": {"namespace": "t", "name": "vm", "uid": "u"},
        "boundAt": T0,
        "reason": "Order",
    },
}


@dataclass(frozen=True)
class Case:
    kind: str
    path: str  # dotted, [n] for a list index; "status..." cases write the status subresource
    value: Any
    # The field the API server's message must name (default: the path itself, indices
    # kept as the server prints them).
    names: str = ""

    @property
    def field(self) -> str:
        return self.names or self.path

    def __str__(self) -> str:
        shown = repr(self.value)
        shown = shown if len(shown) <= 24 else f"{shown[:20]}...({len(shown)})"
        return f"{self.kind}.{self.path}={shown}"


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    steps = [int(s) if s.isdigit() else s for s in re.findall(r"[^.\[\]]+", path)]
    node: Any = obj
    for step in steps[:-1]:
        node = node[step] if isinstance(step, int) else node.setdefault(step, {})
    node[steps[-1]] = value


def long(n: int, c: str = "a") -> str:
    return c * n


CASES = [
    # --- GPUClass: resourceName a valid extended resource name, never the slot space ---
    Case("GPUClass", "spec.resourceName", "GPU"),
    Case("GPUClass", "spec.resourceName", "gpu.cozystack.io/10de-2330-s0"),
    Case("GPUClass", "spec.resourceName", "gpu.cozystack.io/anything"),
    Case("GPUClass", "spec.resourceName", "devices.kubevirt.io/kvm"),
    Case("GPUClass", "spec.resourceName", "kubernetes.io/gpu"),
    Case("GPUClass", "spec.resourceName", "gpus.kubernetes.io/gpu"),
    Case("GPUClass", "spec.resourceName", "Example.com/gpu"),
    Case("GPUClass", "spec.resourceName", "example.com/" + long(64)),
    Case("GPUClass", "spec.resourceName", long(254) + "/gpu"),
    Case("GPUClass", "spec.resourceName", "example.com/" + long(400)),
    Case("GPUClass", "spec.resourceName", "example.com/gpu/extra"),
    Case("GPUClass", "spec.resourceName", "example.com/-gpu"),
    Case("GPUClass", "spec.resourceName", "example.com/gpu model"),
    Case("GPUClass", "spec.resourceName", 42),
    Case("GPUClass", "spec.match.vendorID", "10de"),
    Case("GPUClass", "spec.match.vendorID", "0x10DE"),
    Case("GPUClass", "spec.match.deviceIDs", ["0x2330", "0x2330"]),
    Case("GPUClass", "spec.match.deviceIDs", [f"0x{i:04x}" for i in range(65)]),
    Case("GPUClass", "spec.match.deviceIDs[0]", "2330"),
    Case("GPUClass", "spec.match.nodeSelector", {f"k{i}": "v" for i in range(33)}),
    Case("GPUClass", "spec.match.nodeSelector", {"gpu": long(64)}, "spec.match.nodeSelector.gpu"),
    Case("GPUClass", "spec.match.nodeSelector", {long(400): "v"}),
    Case("GPUClass", "spec.placement.policy", "Random"),
    Case("GPUClass", "spec.placement.topology", "Rack"),
    Case("GPUClass", "spec.reservation.releaseAfterStopped", "99999999999999999999h"),
    Case("GPUClass", "spec.reservation.releaseAfterStopped", "87601h"),
    Case("GPUClass", "spec.reservation.releaseAfterStopped", "99999h99999h"),
    Case("GPUClass", "spec.reservation.releaseAfterStopped", "999999h"),
    Case("GPUClass", "spec.reservation.releaseAfterStopped", "1d"),
    Case("GPUClass", "spec.reservation.releaseAfterStopped", "-1h"),
    Case("GPUClass", "spec.cleaning", "Wipe"),
    Case("GPUClass", "spec.pinning", "Slot"),
    Case("GPUClass", "status.devices", -1),
    Case("GPUClass", "status.largestFreeSet", 1 << 31),
    Case("GPUClass", "status.conditions", [{"type": f"T{i}", "status": "True"} for i in range(17)]),
    # --- GPUDevice: what a forged one could carry ---------------------------------------
    Case("GPUDevice", "spec.nodeName", ""),
    Case("GPUDevice", "spec.nodeName", "Node_A"),
    Case("GPUDevice", "spec.nodeName", "-node"),
    Case("GPUDevice", "spec.nodeName", long(254)),
    Case("GPUDevice", "spec.pciAddress", "0000:3B:00.0"),
    Case("GPUDevice", "spec.slot", 4096),
    Case("GPUDevice", "spec.slot", 1 << 62),
    Case("GPUDevice", "spec.slot", -1),
    Case("GPUDevice", "spec.slot", "3"),
    Case("GPUDevice", "spec.vendorID", "0x10de0"),
    Case("GPUDevice", "spec.deviceID", "0xZZZZ"),
    Case("GPUDevice", "spec.model", long(1 << 20)),
    Case("GPUDevice", "spec.model", long(257)),
    Case("GPUDevice", "spec.numaNode", -1),
    Case("GPUDevice", "spec.numaNode", 1024),
    Case("GPUDevice", "spec.iommuGroup", -1),
    Case("GPUDevice", "spec.iommuGroup", 1 << 21),
    Case("GPUDevice", "spec.nvlinkDomain", long(65)),
    Case("GPUDevice", "spec.pcieSwitch", "switch-1"),
    Case("GPUDevice", "spec.driver", long(65)),
    Case("GPUDevice", "spec.health", "Sick"),
    Case("GPUDevice", "spec.healthMessage", long(1025)),
    Case("GPUDevice", "spec.lastReset", "yesterday"),
    Case("GPUDevice", "spec.unschedulable", "yes"),
    Case("GPUDevice", "status.className", long(254)),
    Case("GPUDevice", "status.phase", "Gone"),
    Case("GPUDevice", "status.binding.vm.namespace", long(64)),
    Case("GPUDevice", "status.binding.vm.uid", long(129)),
    Case("GPUDevice", "status.binding.reason", "Stolen"),
    Case("GPUDevice", "status.lostReason", long(1025)),
    Case("GPUDevice", "status.conditions[0].message", long(32769)),
    # --- GPUBindRequest: names and counts ---------------------------------------------
    Case("GPUBindRequest", "spec.vm.name", ""),
    Case("GPUBindRequest", "spec.vm.name", long(254)),
    Case("GPUBindRequest", "spec.vm.uid", long(129)),
    Case("GPUBindRequest", "spec.vmi.name", long(254)),
    Case("GPUBindRequest", "spec.requests", []),
    Case("GPUBindRequest", "spec.requests", [{"className": "c", "count": 1}] * 33),
    Case("GPUBindRequest", "spec.requests[0].count", 0),
    Case("GPUBindRequest", "spec.requests[0].count", 65),
    Case("GPUBindRequest", "spec.requests[0].className", ""),
    Case("GPUBindRequest", "spec.requests[0].className", long(254)),
    Case("GPUBindRequest", "spec.requests[0].alternatives", ["c"] * 33),
    Case("GPUBindRequest", "spec.requests[0].alternatives[0]", long(254)),
    Case("GPUBindRequest", "status.message", long(1025)),
    Case("GPUBindRequest", "status.nodeName", long(254)),
    Case("GPUBindRequest", "status.phase", "Maybe"),
    # --- GPUUsageRecord: the ledger ---------------------------------------------------
    Case("GPUUsageRecord", "spec.vm", ""),
    Case("GPUUsageRecord", "spec.vm", long(254)),
    Case("GPUUsageRecord", "spec.vmi.uid", long(129)),
    Case("GPUUsageRecord", "spec.device", ""),
    Case("GPUUsageRecord", "spec.className", long(254)),
    Case("GPUUsageRecord", "spec.nodeName", long(254)),
    Case("GPUUsageRecord", "spec.start", "not a time"),
    Case("GPUUsageRecord", "spec.end", "2025-12-31T00:00:00Z"),
]


def collection(kind: str, ns: str) -> str:
    plural = kind.lower() + ("es" if kind == "GPUClass" else "s")
    return (
        f"{API}/namespaces/{ns}/{plural}"
        if kind in ("GPUBindRequest", "GPUUsageRecord")
        else (f"{API}/{plural}")
    )


async def refusal(admin: KubeClient, ns: str, case: Case) -> str:
    obj = base(case.kind)
    obj["metadata"] = {"name": f"b-{uid()}"}
    if case.kind == "GPUDevice":
        obj["metadata"]["name"] = f"node-a-{uid()}"
    path = collection(case.kind, ns)
    if case.path.startswith("status"):
        stored = await admin.request("POST", path, obj)
        stored["status"] = copy.deepcopy(DEVICE_STATUS) if case.kind == "GPUDevice" else {}
        if case.path.startswith("status.conditions[0]"):
            stored["status"]["conditions"] = [{"type": "T", "status": "True"}]
        _set(stored, case.path, case.value)
        method, path, obj = "PUT", f"{path}/{obj['metadata']['name']}/status", stored
    else:
        _set(obj, case.path, case.value)
        method = "POST"
    with pytest.raises(Invalid) as e:
        await admin.request(method, path, obj)
    return e.value.message


def test_the_table_covers_every_kind_with_at_least_sixty_values() -> None:
    assert len(CASES) >= 60
    assert {c.kind for c in CASES} == {"GPUClass", "GPUDevice", "GPUBindRequest", "GPUUsageRecord"}


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_bad_value_is_refused_naming_its_field(
    control_plane: ControlPlane, admin: KubeClient, case: Case
) -> None:
    message = await refusal(admin, namespace(control_plane), case)
    assert case.field in message, message[:600]


async def test_a_valid_object_of_each_kind_is_accepted(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    # The table's base objects are valid, so each refusal is the one field's doing.
    ns = namespace(control_plane)
    for kind in ("GPUClass", "GPUDevice", "GPUBindRequest", "GPUUsageRecord"):
        obj = base(kind)
        obj["metadata"] = {"name": f"node-a-ok-{uid()}"}
        await admin.request("POST", collection(kind, ns), obj)


async def test_the_longest_reservation_allowed_is_accepted(admin: KubeClient) -> None:
    obj = base("GPUClass")
    obj["metadata"] = {"name": f"b-{uid()}"}
    obj["spec"]["reservation"] = {"releaseAfterStopped": "87600h"}
    await admin.request("POST", f"{API}/gpuclasses", obj)


async def test_an_open_records_start_is_immutable(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns = namespace(control_plane)
    obj = base("GPUUsageRecord") | {"metadata": {"name": "r"}}
    stored = await admin.request("POST", collection("GPUUsageRecord", ns), obj)
    stored["spec"]["start"] = "2025-06-01T00:00:00Z"  # billed from earlier: more GPU-hours

    with pytest.raises(Invalid) as e:
        await admin.request("PUT", f"{collection('GPUUsageRecord', ns)}/r", stored)

    assert "spec.start" in e.value.message and "immutable" in e.value.message


async def test_an_open_record_may_still_be_closed(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns = namespace(control_plane)
    obj = base("GPUUsageRecord") | {"metadata": {"name": "r"}}
    stored = await admin.request("POST", collection("GPUUsageRecord", ns), obj)
    stored["spec"]["end"] = T1

    closed = await admin.request("PUT", f"{collection('GPUUsageRecord', ns)}/r", stored)

    assert closed["spec"]["end"] == T1
