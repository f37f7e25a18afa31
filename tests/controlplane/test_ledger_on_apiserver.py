"""The ledger on a real control plane with kube-controller-manager's namespace, garbage
collector and quota controllers: a tenant's namespace deleted for real loses none of its
usage records, which the tenant could read in it until then and cannot write; and with a
`pinning: Node` class, where the launcher pod requests the class's resourceName, both
gpu-binder and Kubernetes count a VM's GPUs, and a VM at its quota is refused by neither.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from controllermanager import controller_manager  # noqa: F401 (a fixture)
from realcluster import Fleet, end_vmi, eventually, namespace, put, run_vmi, vmi_of
from test_pod_webhook import Tenant

from conftest import StartBinder
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import RECORD_COPY_LABEL, GPUUsageRecord, RecordKind
from gpu_binder.binder.config import Config
from gpu_binder.client.errors import ApiError, NotFound
from gpu_binder.envtest import ControlPlane
from gpu_binder.envtest.process import Process
from gpu_binder.kube import KubeClient, connect
from gpu_binder.sim.launcher import render_launcher_pod

pytestmark = pytest.mark.controlplane

LEDGER = Config().ledger_namespace


async def test_deleting_a_tenants_namespace_loses_none_of_its_records(
    control_plane: ControlPlane,
    admin: KubeClient,
    start_binder: StartBinder,
    controller_manager: Process,  # noqa: F811
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    tenant = control_plane.add_user(f"admin-of-{ns}")
    put(
        control_plane,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "admin", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [{"kind": "User", "name": tenant.name}],
        },
    )
    await start_binder(Config())
    vm = await fleet.create_vm(ns, "vm", gpus=2)
    await eventually(lambda: _held(fleet, ns, "vm", 2), what="bound")
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(2)))
    await run_vmi(admin, vmi, node)
    opened = await eventually(lambda: _ledger(admin, ns, RecordKind.ATTACHED, 2), what="opened")

    async with await connect(str(tenant.kubeconfig)) as as_tenant:
        # The tenant (namespace admin, with its role's aggregated gpu-binder-tenant rules)
        # reads its copies, and may write neither them nor the ledger.
        copies = await eventually(lambda: _copies(as_tenant, ns, 2), what="the tenant's copies")
        assert all(c.metadata.labels[RECORD_COPY_LABEL] == LEDGER for c in copies)
        with pytest.raises(ApiError) as refused:
            await as_tenant.delete(GPUUsageRecord, copies[0].metadata.name, ns)
        assert refused.value.code == 403
        with pytest.raises(ApiError) as refused:
            await as_tenant.list(GPUUsageRecord, LEDGER)
        assert refused.value.code == 403

    await asyncio.sleep(1.1)  # finish times have whole seconds: past the records' start
    path = f"/api/v1/namespaces/{ns}"
    assert control_plane.request("DELETE", path).ok
    # The namespace controller deletes the VM and the VMI (the usage finalizer holds it);
    # KubeVirt then shuts the guest down: virt-handler reports it Succeeded.
    held = await eventually(lambda: _terminating(admin, ns), what="the VMI Terminating")
    await end_vmi(admin, held)
    finished = (await admin.get(VirtualMachineInstance, "vm", ns)).finished_at
    await eventually(lambda: _gone(control_plane, path), timeout=60, what="the namespace gone")

    records = await _ledger(admin, ns, RecordKind.ATTACHED, 2)
    assert sorted(r.metadata.name for r in records) == sorted(r.metadata.name for r in opened)
    assert all(r.spec.end == finished for r in records)
    # Reserved: from the bind to the VMI's start, and from its end to the VM's release.
    items = (await admin.list(GPUUsageRecord, LEDGER)).items
    reserved = [r for r in items if r.spec.namespace == ns and r.spec.kind == RecordKind.RESERVED]
    assert len(reserved) >= 2 and all(r.spec.end is not None for r in reserved)


async def test_a_vm_at_its_quota_of_a_node_pinned_class_is_refused_by_neither_count(
    control_plane: ControlPlane,
    admin: KubeClient,
    start_binder: StartBinder,
    controller_manager: Process,  # noqa: F811
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class(pinning="Node")
    await fleet.create_node("a")
    tenant = Tenant(control_plane)
    ns = tenant.ns
    put(
        control_plane,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpus", "namespace": ns},
            "spec": {"hard": {f"requests.{fleet.resource}": "1"}},
        },
    )
    # Kubernetes' quota admission refuses a pod its controller has not counted yet.
    await eventually(lambda: _quota_counted(control_plane, ns), what="the quota's status")
    await start_binder(Config())
    vm = await fleet.create_vm(ns, "vm", gpus=1)
    await eventually(lambda: _held(fleet, ns, "vm", 1), what="bound: 1 of 1 held")
    status, vmi = await tenant.create_vmi(vmi_of(vm, ns, "vm", fleet.gpus(1)))
    assert status == 201, vmi

    # The launcher pod asks Kubernetes for the class's resourceName: counted there too.
    status, pod = await tenant.create_pod(render_launcher_pod(vmi))
    assert status == 201, pod
    used = await eventually(lambda: _quota_used(control_plane, ns, fleet.resource), what="used")
    assert used == "1"

    other = await fleet.create_vm(ns, "other", gpus=1)
    status, answer = await tenant.create_vmi(vmi_of(other, ns, "other", fleet.gpus(1)))
    assert status == 403 and "holds 1 of the 1" in answer["message"], answer


async def _held(fleet: Fleet, ns: str, vm: str, n: int) -> list[object]:
    devices = await fleet.set_of(ns, vm)
    return list(devices) if len(devices) == n else []


async def _ledger(admin: KubeClient, ns: str, kind: RecordKind, n: int) -> list[GPUUsageRecord]:
    items = (await admin.list(GPUUsageRecord, LEDGER)).items
    found = [r for r in items if r.spec.namespace == ns and r.spec.kind == kind]
    return found if len(found) == n else []


async def _copies(client: KubeClient, ns: str, n: int) -> list[GPUUsageRecord]:
    items = (await client.list(GPUUsageRecord, ns)).items
    found = [r for r in items if r.spec.kind == RecordKind.ATTACHED]
    return found if len(found) >= n else []


async def _terminating(admin: KubeClient, ns: str) -> VirtualMachineInstance | None:
    try:
        vmi = await admin.get(VirtualMachineInstance, "vm", ns)
    except NotFound:
        return None
    return vmi if vmi.metadata.deletion_timestamp is not None else None


async def _gone(cp: ControlPlane, path: str) -> bool:
    return (await asyncio.to_thread(cp.request, "GET", path)).status == 404


async def _quota_status(cp: ControlPlane, ns: str) -> dict[str, Any]:
    path = f"/api/v1/namespaces/{ns}/resourcequotas/gpus"
    answer = await asyncio.to_thread(cp.request, "GET", path)
    status: dict[str, Any] = (answer.json().get("status") or {}) if answer.ok else {}
    return status


async def _quota_counted(cp: ControlPlane, ns: str) -> bool:
    return bool((await _quota_status(cp, ns)).get("hard"))


async def _quota_used(cp: ControlPlane, ns: str, resource: str) -> str | None:
    used = (await _quota_status(cp, ns)).get("used") or {}
    value = used.get(f"requests.{resource}")
    return value if value and value != "0" else None
