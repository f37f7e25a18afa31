"""Issue 11, attack 5, on a real API server with a real ResourceQuota: a tenant that stops
its VM (`runStrategy: Halted`, its own patch under its own credentials) neither escapes
its quota nor goes unbilled. The stopped VM keeps its GPUs, which are billed as Reserved
from the moment its VMI finished (`gpu-binder usage --kind reserved`) and still count
against the namespace's quota: another VM of the tenant waits and a VMI past the quota
is denied by the webhook. KubeVirt's part of the stop (virt-controller deleting the VMI,
virt-handler reporting it Succeeded) is played by the admin client."""

from __future__ import annotations

import asyncio
import json

import pytest
from realcluster import Fleet, end_vmi, eventually, namespace, put, run_vmi, vmi_of
from test_usage_report import gpu_binder_usage

from conftest import StartBinder
from gpu_binder.api.kinds import Event
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUDevice, GPUUsageRecord, RecordKind
from gpu_binder.binder.config import Config
from gpu_binder.client.errors import ApiError, NotFound
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient, connect

pytestmark = pytest.mark.controlplane

LEDGER = Config().ledger_namespace


async def test_a_tenant_stopping_its_vm_keeps_it_billed_and_inside_its_quota(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    tenant = control_plane.add_user(f"tenant-of-{ns}")
    _grant_vm_edit(control_plane, ns, tenant.name)
    put(
        control_plane,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpus", "namespace": ns},
            "spec": {"hard": {f"requests.{fleet.resource}": "2"}},
        },
    )
    await start_binder(Config())
    vm = await fleet.create_vm(ns, "vm", gpus=2)
    bound = await eventually(lambda: _held(fleet, ns, "vm", 2), what="the VM's set")
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(2)))
    await run_vmi(admin, vmi, node)
    await eventually(lambda: _records(admin, ns, RecordKind.ATTACHED, open_=True), what="attached")
    await asyncio.sleep(1.1)  # finish times have whole seconds: past the records' start

    # The tenant stops its VM; KubeVirt deletes the VMI, which shuts down and finishes.
    async with await connect(str(tenant.kubeconfig)) as as_tenant:
        await as_tenant.patch(VirtualMachine, "vm", ns, {"spec": {"runStrategy": "Halted"}})
    await admin.delete(VirtualMachineInstance, "vm", ns)
    await end_vmi(admin, await admin.get(VirtualMachineInstance, "vm", ns))
    finished = (await admin.get(VirtualMachineInstance, "vm", ns)).finished_at
    await eventually(lambda: _vmi_gone(admin, ns), what="the VMI gone (its records closed)")

    # Billed: attached until the finish, reserved from it, on the very same GPUs.
    attached = await _records(admin, ns, RecordKind.ATTACHED, open_=False)
    # Ended at the finish, or when the binder saw the VMI end if later (issue 11 item 4).
    ends = {r.spec.end for r in attached}
    assert len(attached) == 2 and len(ends) == 1
    [ended] = ends
    assert ended is not None and finished is not None and ended >= finished
    reserved = await eventually(
        lambda: _records(admin, ns, RecordKind.RESERVED, open_=True, start=ended),
        what="reserved from the finish",
    )
    held = await _held(fleet, ns, "vm", 2)
    assert sorted(d.metadata.name for d in held) == sorted(d.metadata.name for d in bound)
    assert sorted(r.spec.device for r in reserved) == sorted(d.metadata.name for d in held)
    await asyncio.sleep(1.1)
    code, out, err = await gpu_binder_usage(
        control_plane, "-n", ns, "--kind", "reserved", "--from", "2020-01-01", "-o", "json"
    )
    assert code == 0, err
    assert json.loads(out)["total"]["gpu_seconds"] > 2 * 1.0, out

    # Inside the quota: the stopped VM's 2 GPUs are all of it.
    await fleet.create_vm(ns, "other", gpus=1)
    said = await eventually(
        lambda: _events(admin, ns, "other", "GPUQuotaExceeded"), what="the waiting order's Event"
    )
    assert f"holds 2 of the 2 × {fleet.class_name}" in said[0].note
    with pytest.raises(ApiError) as denied:
        await admin.create(vmi_of(None, ns, "standalone", fleet.gpus(1)))
    assert "holds 2 of the 2" in denied.value.message and "asks for 1 more" in denied.value.message
    assert await fleet.set_of(ns, "other") == []
    assert len([d for d in await fleet.devices() if d.status.binding is not None]) == 2


def _grant_vm_edit(cp: ControlPlane, ns: str, user: str) -> None:
    """What KubeVirt's edit role lets a tenant do to its VMs (kubevirt.io:edit)."""
    rules = [
        {
            "apiGroups": ["kubevirt.io"],
            "resources": ["virtualmachines"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        }
    ]
    meta = {"name": "vm-edit", "namespace": ns}
    put(
        cp,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": rules,
        },
    )
    put(
        cp,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "vm-edit"},
            "subjects": [{"kind": "User", "name": user}],
        },
    )


async def _held(fleet: Fleet, ns: str, vm: str, n: int) -> list[GPUDevice]:
    devices = await fleet.set_of(ns, vm)
    return devices if len(devices) == n else []


async def _records(
    admin: KubeClient, ns: str, kind: RecordKind, open_: bool, start: object = None
) -> list[GPUUsageRecord]:
    items = (await admin.list(GPUUsageRecord, LEDGER)).items
    return [
        r
        for r in items
        if r.spec.namespace == ns
        and r.spec.kind == kind
        and (r.spec.end is None) == open_
        and (start is None or r.spec.start == start)
    ]


async def _vmi_gone(admin: KubeClient, ns: str) -> bool:
    try:
        await admin.get(VirtualMachineInstance, "vm", ns)
    except NotFound:
        return True
    return False


async def _events(admin: KubeClient, ns: str, name: str, reason: str) -> list[Event]:
    items = (await admin.list(Event, ns)).items
    return [e for e in items if e.regarding.get("name") == name and e.reason == reason]
