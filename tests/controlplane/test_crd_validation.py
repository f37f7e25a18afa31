"""The CRDs installed on a real API server refuse bad objects, saying what is wrong."""

from __future__ import annotations

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
