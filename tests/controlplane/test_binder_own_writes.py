"""The binder's writes of objects it does not own change the one field each is for
(deploy/binder/own-writes-policy.yaml), on a real API server, as the binder's account.

RBAC grants `patch` of nodes/status, VMIs and GPUDevices whole; the policy lets the binder
set a node's GPUDegraded condition, remove a VMI's usage finalizer and add or remove a
device's finalizer, and refuses every other change those verbs could make. The session's
binders run under it too (conftest installs it), so every binder test shows the binder's
own writes pass it. (Each expression is evaluated by an allowed write as well as refused
ones: a CEL error would refuse the allowed write too, under failurePolicy Fail.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from realcluster import BINDER_SA, Fleet, eventually, namespace, vmi_of

from conftest import BinderSetup
from gpu_binder.api.kubevirt import Node, VirtualMachineInstance
from gpu_binder.api.types import FINALIZER, USAGE_FINALIZER, GPUDevice
from gpu_binder.client.errors import Forbidden
from gpu_binder.kube import KubeClient, connect

pytestmark = pytest.mark.controlplane

POLICY = "gpu-binder-own-writes"
DEGRADED = {"type": "GPUDegraded", "status": "True", "reason": "Test", "message": "test"}


@pytest.fixture
async def binder(binder_setup: BinderSetup) -> AsyncIterator[KubeClient]:
    async with await connect(str(binder_setup.cp.kubeconfig), impersonate=BINDER_SA) as client:
        yield client


async def refused(write: Any) -> str:
    with pytest.raises(Forbidden) as e:
        await write
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in e.value.message, e.value.message
    return e.value.message


async def node_of(admin: KubeClient) -> str:
    return await Fleet(admin, gpus_per_node=1).create_node("a")


async def until_enforced(binder: KubeClient, node: str) -> None:
    async def probe() -> bool:
        try:
            await binder.request(
                "PATCH",
                f"/api/v1/nodes/{node}/status?dryRun=All",
                {"metadata": {"labels": {"probe": "x"}}},
                content_type="application/merge-patch+json",
            )
        except Forbidden:
            return True
        return False

    await eventually(probe, timeout=30, what=f"{POLICY} in force")


async def test_the_binder_sets_the_gpu_degraded_condition(
    admin: KubeClient, binder: KubeClient
) -> None:
    node = await node_of(admin)
    await until_enforced(binder, node)
    written = await binder.set_condition(Node, node, "", DEGRADED)
    types = {c["type"]: c["status"] for c in written.raw["status"]["conditions"]}
    assert types["GPUDegraded"] == "True" and types["Ready"] == "True"


@pytest.mark.parametrize(
    ("what", "status"),
    [
        ("the kubelet's Ready condition", {"conditions": [{"type": "Ready", "status": "False"}]}),
        ("allocatable", {"allocatable": {"example.com/gpu": "0"}}),
        ("capacity", {"capacity": {"cpu": "1000"}}),
        ("addresses", {"addresses": [{"type": "InternalIP", "address": "203.0.113.9"}]}),
    ],
)
async def test_the_binder_changes_nothing_else_of_a_nodes_status(
    admin: KubeClient, binder: KubeClient, what: str, status: dict[str, Any]
) -> None:
    node = await node_of(admin)
    await until_enforced(binder, node)
    message = await refused(
        binder.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": status},
            content_type="application/strategic-merge-patch+json",
        )
    )
    assert f"only the GPUDegraded condition of node {node}" in message, what


async def test_the_binder_relabels_no_node_through_its_status(
    admin: KubeClient, binder: KubeClient
) -> None:
    node = await node_of(admin)
    await until_enforced(binder, node)
    patch = {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}
    message = await refused(binder.patch_status(Node, node, "", patch))
    assert "no labels, annotations or owners" in message


async def vmi_with_finalizers(
    admin: KubeClient, control_plane: Any, *finalizers: str
) -> VirtualMachineInstance:
    ns = namespace(control_plane)
    vmi = vmi_of(None, ns, "vm", [])
    raw = vmi.raw
    raw["metadata"]["finalizers"] = list(finalizers)
    return await admin.create(VirtualMachineInstance.from_dict(raw))


def finalizers_patch(obj: Any, finalizers: list[str]) -> dict[str, Any]:
    return {
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.metadata.resource_version,
        }
    }


async def test_the_binder_removes_a_vmis_usage_finalizer(
    binder_setup: BinderSetup, admin: KubeClient, binder: KubeClient
) -> None:
    await until_enforced(binder, await node_of(admin))
    vmi = await vmi_with_finalizers(admin, binder_setup.cp, "kubevirt.io/x", USAGE_FINALIZER)
    meta = vmi.metadata
    written = await binder.patch(
        VirtualMachineInstance, meta.name, meta.namespace, finalizers_patch(vmi, ["kubevirt.io/x"])
    )
    assert written.metadata.finalizers == ("kubevirt.io/x",)


@pytest.mark.parametrize(
    ("what", "patch", "says"),
    [
        ("another finalizer", {"metadata": {"finalizers": [USAGE_FINALIZER]}}, "no finalizer"),
        (
            "a finalizer added",
            {"metadata": {"finalizers": ["kubevirt.io/x", USAGE_FINALIZER, "x.io/hold"]}},
            "no finalizer",
        ),
        (
            "an annotation",
            {"metadata": {"annotations": {"gpu.cozystack.io/devices": "x"}}},
            "no labels",
        ),
        ("a label", {"metadata": {"labels": {"tenant": "other"}}}, "no labels"),
        (
            "its spec",
            {"spec": {"nodeSelector": {"kubernetes.io/hostname": "x"}}},
            "only the finalizer",
        ),
        ("its status", {"status": {"phase": "Succeeded"}}, "only the finalizer"),
    ],
)
async def test_the_binder_changes_nothing_else_of_a_vmi(
    binder_setup: BinderSetup,
    admin: KubeClient,
    binder: KubeClient,
    what: str,
    patch: dict[str, Any],
    says: str,
) -> None:
    await until_enforced(binder, await node_of(admin))
    vmi = await vmi_with_finalizers(admin, binder_setup.cp, "kubevirt.io/x", USAGE_FINALIZER)
    meta = vmi.metadata
    message = await refused(binder.patch(VirtualMachineInstance, meta.name, meta.namespace, patch))
    assert says in message, what


async def test_the_binder_adds_a_vmis_usage_finalizer_never(
    binder_setup: BinderSetup, admin: KubeClient, binder: KubeClient
) -> None:
    await until_enforced(binder, await node_of(admin))
    vmi = await vmi_with_finalizers(admin, binder_setup.cp)
    meta = vmi.metadata
    patch = finalizers_patch(vmi, [USAGE_FINALIZER])
    message = await refused(binder.patch(VirtualMachineInstance, meta.name, meta.namespace, patch))
    assert "only removes the usage finalizer" in message


async def device_of(admin: KubeClient) -> GPUDevice:
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_node("a")
    (device,) = await fleet.devices()
    return device


async def test_the_binder_adds_and_removes_a_devices_finalizer(
    admin: KubeClient, binder: KubeClient
) -> None:
    device = await device_of(admin)
    await until_enforced(binder, device.spec.node_name)
    name = device.metadata.name
    removed = await binder.patch(GPUDevice, name, "", finalizers_patch(device, []))
    assert removed.metadata.finalizers == ()
    added = await binder.patch(GPUDevice, name, "", finalizers_patch(removed, [FINALIZER]))
    assert added.metadata.finalizers == (FINALIZER,)


@pytest.mark.parametrize(
    ("what", "patch", "says"),
    [
        ("its spec", {"spec": {"slot": 7}}, "only the finalizer"),
        ("unschedulable", {"spec": {"unschedulable": True}}, "only the finalizer"),
        ("a label", {"metadata": {"labels": {"gpu.cozystack.io/node": "x"}}}, "no labels"),
        ("another finalizer", {"metadata": {"finalizers": [FINALIZER, "x.io/y"]}}, "no finalizer"),
    ],
)
async def test_the_binder_changes_nothing_else_of_a_device(
    admin: KubeClient, binder: KubeClient, what: str, patch: dict[str, Any], says: str
) -> None:
    device = await device_of(admin)
    await until_enforced(binder, device.spec.node_name)
    message = await refused(binder.patch(GPUDevice, device.metadata.name, "", patch))
    assert says in message, what
