"""The binder's rules that need time, a race or an outage, on a real API server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from realcluster import BINDER_SA, Fleet, end_vmi, eventually, namespace, run_vmi, vmi_of

from conftest import Binders, StartBinder
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import (
    RECORD_CLOSED,
    RECORD_COPY_LABEL,
    RECORD_NAMESPACE_LABEL,
    RECORD_OPEN,
    RECORD_STATE_LABEL,
    USAGE_FINALIZER,
    GPUDevice,
    GPUUsageRecord,
    Phase,
    RecordKind,
)
from gpu_binder.binder.config import Config
from gpu_binder.client.errors import NotFound
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient, load
from gpu_binder.kube.manager import Manager

pytestmark = pytest.mark.controlplane

LEDGER = Config().ledger_namespace
FAST = Config(lost_grace=timedelta(seconds=2), resync=timedelta(milliseconds=500))


async def test_a_lost_node_rebinds_stopped_vms_and_running_ones_keep_their_gpus(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    node_a = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder(FAST)
    await fleet.create_vm(ns, "stopped", gpus=2, running=False)
    running = await fleet.create_vm(ns, "running", gpus=2)
    await eventually(lambda: _on(fleet, ns, "stopped", node_a), what="stopped VM bound")
    await eventually(lambda: _on(fleet, ns, "running", node_a), what="running VM bound")
    vmi = await admin.create(vmi_of(running, ns, "running", fleet.gpus(2)))
    await run_vmi(admin, vmi, node_a)
    node_b = await fleet.create_node("b")

    await fleet.set_node(node_a, ready=False)

    await eventually(lambda: _on(fleet, ns, "stopped", node_b), what="stopped VM rebound")
    kept = await eventually(lambda: _lost(fleet, ns, "running", node_a), what="running kept")
    assert all(d.status.attachment is not None for d in kept)

    await end_vmi(admin, vmi)

    await eventually(lambda: _on(fleet, ns, "running", node_b), what="running VM rebound")
    on_a = [d for d in await fleet.devices() if d.spec.node_name == node_a]
    assert all(d.status.binding is None and d.status.phase == Phase.LOST for d in on_a)


async def test_a_deleted_device_waits_for_its_vmi_then_goes(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder(FAST)
    vm = await fleet.create_vm(ns, "vm", gpus=1)
    (device,) = await eventually(lambda: _on(fleet, ns, "vm", node, 1), what="bound")
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(1)))
    await run_vmi(admin, vmi, node)
    await eventually(lambda: _phase(admin, device.metadata.name, Phase.ATTACHED), what="attached")

    await admin.delete(GPUDevice, device.metadata.name)

    held = await eventually(
        lambda: _phase(admin, device.metadata.name, Phase.RELEASING), what="releasing"
    )
    assert held.metadata.deletion_timestamp is not None and held.status.attachment is not None
    await end_vmi(admin, vmi)
    await eventually(lambda: _gone(admin, device.metadata.name), what="device gone")


async def test_a_concurrent_write_costs_a_conflict_and_never_a_wrong_placement(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    cordoned: list[str] = []

    class Racing(KubeClient):
        """Between the binder's read and its write, an admin cordons the device."""

        async def update_status(self, obj: Any) -> Any:
            if isinstance(obj, GPUDevice) and obj.status.binding is not None and not cordoned:
                cordoned.append(obj.metadata.name)
                await admin.patch(
                    GPUDevice, obj.metadata.name, "", {"spec": {"unschedulable": True}}
                )
            return await super().update_status(obj)

    racing = Racing(await load(str(control_plane.kubeconfig)), impersonate=BINDER_SA)
    binder = await start_binder(FAST, client=racing)
    await fleet.create_vm(ns, "vm", gpus=1)

    (device,) = await eventually(lambda: _on(fleet, ns, "vm", node, 1), what="bound")
    assert cordoned and device.metadata.name != cordoned[0]
    assert binder.metrics.conflicts._value.get() >= 1
    (other,) = [d for d in await fleet.devices() if d.metadata.name == cordoned[0]]
    assert other.spec.unschedulable and other.status.binding is None


async def test_a_gpu_vmi_deleted_while_no_binder_runs_stays_until_one_closes_its_records(
    control_plane: ControlPlane, admin: KubeClient, start_binder: Binders
) -> None:
    ns, node, first, vmi = await _a_gpu_vmi(control_plane, admin, start_binder)
    assert USAGE_FINALIZER in vmi.metadata.finalizers  # the webhook's patch added it
    await run_vmi(admin, vmi, node)
    await eventually(lambda: _records(admin, ns), what="a usage record opened")
    await asyncio.sleep(1.1)  # finish times have whole seconds: past the record's start
    await start_binder.stop(first)  # an outage: no binder, no webhook

    await end_vmi(admin, vmi)
    await admin.delete(VirtualMachineInstance, "vm", ns)
    await asyncio.sleep(2)  # a binder billing until it noticed would add these seconds
    held = await admin.get(VirtualMachineInstance, "vm", ns)
    assert held.metadata.deletion_timestamp is not None, "Terminating, held by the finalizer"
    assert held.finished_at is not None

    await start_binder(FAST)
    await eventually(lambda: _vmi_gone(admin, ns, "vm"), what="the VMI gone")
    (record,) = await _records(admin, ns)
    assert record.spec.end == held.finished_at


@pytest.mark.parametrize("node_clock_ahead", [600.0, -600.0])
async def test_a_vmi_ended_while_no_binder_ran_is_billed_to_the_second_the_server_stored_it(
    control_plane: ControlPlane, admin: KubeClient, start_binder: Binders, node_clock_ahead: float
) -> None:
    """Its node's clock is ten minutes off, and no binder saw it end: the binder that comes
    back takes the end from the managedFields entry owning the VMI's phase, which the API
    server stamped by its own clock (it billed until it came back, or ten minutes short)."""
    ns, node, first, vmi = await _a_gpu_vmi(control_plane, admin, start_binder)
    await run_vmi(admin, vmi, node)
    await eventually(lambda: _records(admin, ns), what="a usage record opened")
    await asyncio.sleep(1.1)  # past the record's start, in whole seconds
    await start_binder.stop(first)

    before = datetime.now(UTC).replace(microsecond=0)
    await end_vmi(admin, vmi, node_clock_ahead=node_clock_ahead)
    after = datetime.now(UTC)
    await asyncio.sleep(3)  # a binder billing until it noticed would add these seconds
    await start_binder(FAST)

    (record,) = await eventually(lambda: _closed(admin, ns), what="the record closed")
    assert record.spec.end is not None
    assert before <= record.spec.end <= after + timedelta(seconds=1)


async def test_a_closed_record_leaves_the_binders_cache(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    ns, node, binder, vmi = await _a_gpu_vmi(control_plane, admin, start_binder)
    await run_vmi(admin, vmi, node)
    await eventually(lambda: _cached(binder, ns), what="the open record cached")

    await end_vmi(admin, vmi)

    (record,) = await eventually(lambda: _closed(admin, ns), what="the record closed")
    assert record.metadata.labels[RECORD_STATE_LABEL] == RECORD_CLOSED
    await eventually(lambda: _not_cached(binder, ns), what="the closed record dropped")


async def test_an_open_record_from_before_the_ledger_moves_into_it_and_is_closed_there(
    control_plane: ControlPlane, admin: KubeClient, start_binder: Binders
) -> None:
    ns, node, first, vmi = await _a_gpu_vmi(control_plane, admin, start_binder)
    await run_vmi(admin, vmi, node)
    (record,) = await eventually(lambda: _records(admin, ns), what="a usage record opened")
    await eventually(lambda: _copy(admin, ns, record.metadata.name), what="its copy written")
    await start_binder.stop(first)
    # As a binder from before the ledger (and the state label) left it: in the tenant's
    # namespace alone, unlabelled.
    await admin.delete(GPUUsageRecord, record.metadata.name, LEDGER)
    labels = {RECORD_STATE_LABEL: None, RECORD_NAMESPACE_LABEL: None, RECORD_COPY_LABEL: None}
    patch = {"metadata": {"labels": labels}, "spec": {"namespace": None}}
    legacy = await admin.patch(GPUUsageRecord, record.metadata.name, ns, patch)
    assert RECORD_STATE_LABEL not in legacy.metadata.labels and not legacy.spec.namespace

    await start_binder(FAST)  # the upgraded binder
    await eventually(lambda: _labelled(admin, ns, RECORD_OPEN), what="the record moved")
    await end_vmi(admin, vmi)

    (closed,) = await eventually(lambda: _closed(admin, ns), what="the record closed")
    assert closed.metadata.namespace == LEDGER
    assert closed.metadata.labels[RECORD_STATE_LABEL] == RECORD_CLOSED
    # The copy is closed after the ledger's record (a copy never says more than the ledger).
    copy = await eventually(
        lambda: _closed_copy(admin, ns, record.metadata.name), what="the copy closed"
    )
    assert copy.metadata.labels[RECORD_COPY_LABEL] == LEDGER and copy.spec.end == closed.spec.end


async def _a_gpu_vmi(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> tuple[str, str, Manager, VirtualMachineInstance]:
    """A namespace, a node with one GPU, a binder, and a VM's VMI admitted with that GPU."""
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    binder = await start_binder(FAST)
    vm = await fleet.create_vm(ns, "vm", gpus=1)
    await eventually(lambda: _on(fleet, ns, "vm", node, 1), what="bound")
    return ns, node, binder, await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(1)))


async def _cached(binder: Manager, ns: str) -> bool:
    return any(
        r.tenant == ns and r.spec.kind == RecordKind.ATTACHED for r in binder.world.records.values()
    )


async def _not_cached(binder: Manager, ns: str) -> bool:
    return not await _cached(binder, ns)


async def _closed(admin: KubeClient, ns: str) -> list[GPUUsageRecord]:
    records = await _records(admin, ns)
    return records if records and all(r.spec.end is not None for r in records) else []


async def _labelled(admin: KubeClient, ns: str, state: str) -> bool:
    records = await _records(admin, ns)
    return bool(records) and all(
        r.metadata.labels.get(RECORD_STATE_LABEL) == state for r in records
    )


async def _records(admin: KubeClient, ns: str) -> list[GPUUsageRecord]:
    """The namespace's Attached records, in the ledger."""
    items = (await admin.list(GPUUsageRecord, LEDGER)).items
    return [r for r in items if r.tenant == ns and r.spec.kind == RecordKind.ATTACHED]


async def _copy(admin: KubeClient, ns: str, name: str) -> GPUUsageRecord | None:
    try:
        return await admin.get(GPUUsageRecord, name, ns)
    except NotFound:
        return None


async def _closed_copy(admin: KubeClient, ns: str, name: str) -> GPUUsageRecord | None:
    copy = await _copy(admin, ns, name)
    return copy if copy is not None and copy.spec.end is not None else None


async def _vmi_gone(admin: KubeClient, ns: str, name: str) -> bool:
    try:
        await admin.get(VirtualMachineInstance, name, ns)
    except NotFound:
        return True
    return False


async def _on(fleet: Fleet, ns: str, vm: str, node: str, n: int = 2) -> list[GPUDevice]:
    devices = await fleet.set_of(ns, vm)
    ok = len(devices) == n and all(d.spec.node_name == node for d in devices)
    return devices if ok else []


async def _lost(fleet: Fleet, ns: str, vm: str, node: str) -> list[GPUDevice]:
    devices = await _on(fleet, ns, vm, node)
    return devices if all(d.status.phase == Phase.LOST for d in devices) else []


async def _phase(admin: KubeClient, name: str, phase: Phase) -> GPUDevice | None:
    d = await admin.get(GPUDevice, name)
    return d if d.status.phase == phase else None


async def _gone(admin: KubeClient, name: str) -> bool:
    try:
        await admin.get(GPUDevice, name)
    except NotFound:
        return True
    return False
