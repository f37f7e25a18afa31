"""Issue 11's tenant attacks on a real API server: what a hostile tenant writes (a VMI of its
own making, a malformed owner, the devices annotation, the VMI's status) decides neither
placement nor billing.

The tenant is a namespace admin with KubeVirt's edit role (realcluster.tenant). The test
control plane runs no KubeVirt: the admin plays virt-controller (creating a VM's VMI) and
virt-handler (reporting it Running), as the other tests of this tier do.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from realcluster import Fleet, eventually, namespace, run_vmi, tenant, vmi_of

from conftest import StartBinder
from gpu_binder.api.kubevirt import KUBEVIRT_API_VERSION, VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.api.types import (
    DEVICES_ANNOTATION,
    RECORD_OPEN,
    RECORD_STATE_LABEL,
    GPUDevice,
    GPUUsageRecord,
    Phase,
    RecordKind,
)
from gpu_binder.binder.config import Config
from gpu_binder.client.errors import ApiError, Forbidden
from gpu_binder.envtest import ControlPlane, User
from gpu_binder.kube import KubeClient, connect
from gpu_binder.sim import builders
from gpu_binder.sim.launcher import render_launcher_pod

pytestmark = pytest.mark.controlplane

FAST = Config(resync=timedelta(seconds=1))


async def _attached(fleet: Fleet, vmi: VirtualMachineInstance, n: int) -> list[GPUDevice]:
    devices = [
        d
        for d in await fleet.devices()
        if d.status.attachment is not None and d.status.attachment.vmi.uid == vmi.metadata.uid
    ]
    return (
        devices
        if len(devices) == n and all(d.status.phase == Phase.ATTACHED for d in devices)
        else []
    )


async def _records(admin: KubeClient, ns: str) -> list[GPUUsageRecord]:
    return (await admin.list(GPUUsageRecord, ns)).items


async def _open(admin: KubeClient, ns: str, n: int) -> list[GPUUsageRecord]:
    found = [
        r
        for r in await _records(admin, ns)
        if r.metadata.labels.get(RECORD_STATE_LABEL) == RECORD_OPEN
        and r.spec.kind == RecordKind.ATTACHED
    ]
    return found if len(found) == n else []


async def _bound(fleet: Fleet) -> list[GPUDevice]:
    return [d for d in await fleet.devices() if d.status.binding is not None]


def _raw_vmi(
    name: str, ns: str, gpus: list[str], owners: list[dict[str, Any]] | None = None, **meta: Any
) -> dict[str, Any]:
    raw = builders.vmi_object(name, ns, gpus)
    raw["metadata"].update(meta)
    if owners is not None:
        raw["metadata"]["ownerReferences"] = owners
    return raw


def _vm_owner(name: str, uid: str, *, controller: bool) -> dict[str, Any]:
    return {
        "apiVersion": KUBEVIRT_API_VERSION,
        "kind": "VirtualMachine",
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": False,
    }


# --- attack 1: a VMI of the tenant's making, owned by its GPU-less VM ------------------


async def test_a_vmi_owned_by_a_gpu_less_vm_keeps_and_pays_for_what_it_was_admitted_with(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    """The webhook and the binder read one order, the VMI's spec: the 2 GPUs it was admitted
    with stay attached to it and billed while it runs, and no other tenant gets them."""
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns, other = namespace(control_plane), namespace(control_plane)
    alice = tenant(control_plane, ns)
    await start_binder(FAST)
    async with await connect(str(alice.kubeconfig)) as client:
        vm = await client.create(builders.vm_object("vm", ns, (), run_strategy="Always"))
        forged = _raw_vmi(
            "forged", ns, fleet.gpus(2), [_vm_owner("vm", vm.metadata.uid, controller=False)]
        )
        vmi = await client.create(VirtualMachineInstance.from_dict(forged))
    assert sorted(vmi.metadata.annotations[DEVICES_ANNOTATION].split(",")) == sorted(
        d.metadata.name for d in await fleet.devices()
    )
    await run_vmi(admin, vmi, node)

    await eventually(lambda: _attached(fleet, vmi, 2), what="both GPUs attached to the VMI")
    await eventually(lambda: _open(admin, ns, 2), what="a usage record per GPU")
    await fleet.create_vm(other, "thief", gpus=2)
    # Several passes (resync 1 s): the VMI still holds, and pays for, both.
    await asyncio.sleep(4)
    assert await _attached(fleet, vmi, 2)
    assert await _open(admin, ns, 2)
    assert await fleet.set_of(other, "thief") == []


# --- attack 2: ghost bindings -----------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "said"),
    [
        (_vm_owner("vm", "", controller=True), "uid"),
        (_vm_owner("", "0b4c2a7e-0000-4000-8000-000000000001", controller=True), "name"),
        (
            {
                **_vm_owner("vm", "0b4c2a7e-0000-4000-8000-000000000001", controller=True),
                "apiVersion": "",
            },
            "apiVersion",
        ),
    ],
    ids=["uid", "name", "apiVersion"],
)
async def test_a_vmi_with_a_malformed_owner_is_refused_by_the_webhook_and_binds_nothing(
    control_plane: ControlPlane,
    admin: KubeClient,
    start_binder: StartBinder,
    owner: dict[str, Any],
    said: str,
) -> None:
    """The API server would refuse it after the webhook had bound its set (422): the
    webhook refuses it first, saying which field, and asks the binder for nothing."""
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    alice = tenant(control_plane, ns)
    await start_binder(FAST)
    async with await connect(str(alice.kubeconfig)) as client:
        with pytest.raises(ApiError) as refused:
            await client.create(
                VirtualMachineInstance.from_dict(_raw_vmi("ghost", ns, fleet.gpus(2), [owner]))
            )
    message = refused.value.message
    assert "denied the request" in message and "ownerReference" in message and said in message
    await asyncio.sleep(1.5)
    assert await _bound(fleet) == []


async def test_a_set_bound_for_a_vmi_the_api_server_then_refuses_is_freed_within_seconds(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    """A VMI the webhook admits and the API server refuses after it (here: a label value it
    finds invalid) never appears; its set goes well before attachmentGrace."""
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    alice = tenant(control_plane, ns)
    grace = timedelta(seconds=120)
    await start_binder(Config(resync=timedelta(seconds=1), attachment_grace=grace))
    async with await connect(str(alice.kubeconfig)) as client:
        with pytest.raises(ApiError) as refused:
            await client.create(
                VirtualMachineInstance.from_dict(
                    _raw_vmi("ghost", ns, fleet.gpus(2), labels={"team": "not a label value!"})
                )
            )
    assert refused.value.code == 422
    refused_at = time.monotonic()
    assert len(await _bound(fleet)) == 2  # the webhook had asked for them

    async def freed() -> bool:
        return await _bound(fleet) == []

    await eventually(freed, timeout=30, what="the ghost's set released")
    assert time.monotonic() - refused_at < 20


# --- attack 4: the devices annotation and the status, written by the tenant -----------


async def test_a_tenants_devices_annotation_neither_places_nor_bills_more_gpus(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns, other = namespace(control_plane), namespace(control_plane)
    alice = tenant(control_plane, ns)
    await start_binder(FAST)
    vm = await fleet.create_vm(ns, "vm", gpus=1)
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(1)))
    await run_vmi(admin, vmi, node)
    (held,) = await eventually(lambda: _attached(fleet, vmi, 1), what="its GPU attached")
    await eventually(lambda: _open(admin, ns, 1), what="its usage record")

    every = ",".join(sorted(d.metadata.name for d in await fleet.devices()))
    async with await connect(str(alice.kubeconfig)) as client:
        await client.patch(
            VirtualMachineInstance,
            "vm",
            ns,
            {"metadata": {"annotations": {DEVICES_ANNOTATION: every}}},
        )
    await asyncio.sleep(4)  # several passes
    assert [d.metadata.name for d in await _attached(fleet, vmi, 1)] == [held.metadata.name]
    assert [d.metadata.name for d in await fleet.set_of(ns, "vm")] == [held.metadata.name]
    assert [r.spec.device for r in await _open(admin, ns, 1)] == [held.metadata.name]
    # The other three are free: another tenant's order gets them.
    await fleet.create_vm(other, "next", gpus=3)
    taken = await eventually(lambda: fleet.whole_set(other, "next", 3), what="3 GPUs for another")
    assert held.metadata.name not in {d.metadata.name for d in taken}


async def _running_vmi(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> tuple[Fleet, str, str, User, VirtualMachineInstance]:
    """A binder, and a tenant's VM of one GPU whose VMI runs on node a."""
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    alice = tenant(control_plane, ns)
    await start_binder(FAST)
    vm = await fleet.create_vm(ns, "vm", gpus=1)
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(1)))
    await run_vmi(admin, vmi, node)
    return fleet, node, ns, alice, vmi


async def test_a_backdated_status_never_ends_a_record_before_the_binder_saw_the_vmi_running(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    """VMIs have no status subresource: the tenant reports its VMI Succeeded one second
    after it started. The record ends no earlier than when the binder last saw it run."""
    _, _, ns, alice, _ = await _running_vmi(control_plane, admin, start_binder)
    (record,) = await eventually(lambda: _open(admin, ns, 1), what="its usage record")
    await asyncio.sleep(4)  # it runs, and the binder sees it run, for a while

    seen_running = datetime.now(UTC)
    backdated = (record.spec.start + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "phase": "Succeeded",
        "phaseTransitionTimestamps": [
            {"phase": "Succeeded", "phaseTransitionTimestamp": backdated}
        ],
    }
    async with await connect(str(alice.kubeconfig)) as client:
        await client.patch(VirtualMachineInstance, "vm", ns, {"status": status})

    async def closed() -> GPUUsageRecord | None:
        (rec,) = [r for r in await _records(admin, ns) if r.spec.kind == RecordKind.ATTACHED]
        return rec if rec.spec.end is not None else None

    ended = await eventually(closed, what="the record closed")
    assert ended.spec.end is not None
    # Record times are RFC 3339 with whole seconds.
    assert ended.spec.end >= seen_running.replace(microsecond=0), (
        f"closed at {ended.spec.end}, started {record.spec.start}; seen running {seen_running}"
    )


async def test_a_vmi_reported_succeeded_while_its_launcher_pod_runs_keeps_its_gpus_and_record(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    """The tenant writes Succeeded into its running VMI's status, then Running again: the
    kubelet's word (its launcher pod Running, `pods/status`, which the tenant may not
    write) outweighs it, so its GPU stays attached and its one record stays open."""
    fleet, node, ns, alice, vmi = await _running_vmi(control_plane, admin, start_binder)
    pod_raw = render_launcher_pod((await admin.get(VirtualMachineInstance, "vm", ns)).to_dict())
    pod_raw["metadata"]["name"] = "virt-launcher-vm-abcde"
    pod_raw["spec"]["nodeName"] = node
    # Only KubeVirt's virt-controller may create pods holding slot resources (policy
    # gpu-binder-slot-resources, when a test of this session installed it).
    virt_controller = control_plane.add_user(
        "system:serviceaccount:kubevirt:kubevirt-controller", ["system:masters"]
    )
    async with await connect(str(virt_controller.kubeconfig)) as kubevirt:
        pod = await kubevirt.create(Pod.from_dict(pod_raw))
    await admin.update_status(Pod.from_dict({**pod.to_dict(), "status": {"phase": "Running"}}))
    (record,) = await eventually(lambda: _open(admin, ns, 1), what="its usage record")

    async with await connect(str(alice.kubeconfig)) as client:
        stored = await admin.get(Pod, pod.metadata.name, ns)
        with pytest.raises(Forbidden):
            await client.update_status(
                Pod.from_dict({**stored.to_dict(), "status": {"phase": "Succeeded"}})
            )
        await client.patch(VirtualMachineInstance, "vm", ns, {"status": {"phase": "Succeeded"}})
        await asyncio.sleep(3)  # three resyncs of the binder
        assert await _attached(fleet, vmi, 1)
        await client.patch(VirtualMachineInstance, "vm", ns, {"status": {"phase": "Running"}})
    await asyncio.sleep(2)
    (still,) = await _open(admin, ns, 1)
    assert still.metadata.name == record.metadata.name
