"""virt-controller's VM controller (kubevirt/kubevirt `pkg/virt-controller/watch/vm/vm.go`).

Per VM, in the order of `sync`:
- a VM being deleted stops its VMI and, once it is gone, loses the controller's
  finalizer (`removeVMFinalizer`); any other gets it (`addVMFinalizer`);
- its instancetype reference is stored (sim.instancetypes); a sync that changes it ends
  there, the next begins with it;
- its runStrategy (`spec.running` maps to Always/Halted, `RunStrategy()`) runs as
  `syncRunStrategy` runs it, with the state change requests virtctl puts in its status:
  Always restarts a final VMI; RerunOnFailure deletes a final one and starts again only
  after a failure; Once starts one VMI and leaves it final; Manual starts and stops on
  requests only; Halted stops; WaitAsReceiver creates a receiver VMI;
- a VMI starts as `startVMI` makes it (`SetupVMIFromVM`: the template's metadata and spec,
  the VM as controller owner; the VM's spec recorded in a `revision-start-vm-<uid>-<gen>`
  ControllerRevision, sim.startrevisions; the instancetype's devices applied,
  `ApplyToVMI`; the controller's finalizer) and is created through admission; a failed
  start is retried with the workqueue's backoff (sim.ratelimit), a VMI that failed before
  it ran with the start failure backoff (`syncStartFailureStatus`,
  `calculateStartBackoffTime`);
- with the LiveUpdate rollout strategy (KubeVirt's default) and no RestartRequired
  (`syncRestartRequired`: the template spec, instancetype applied, changed since the start
  beyond what is live-updatable), the VMI's affinity and nodeSelector are made the
  template's (`handleAffinityChangeRequest`, `VMIAffinityPatch`,
  `VMNodeSelectorPatch`) — replaced, or removed when the template has none, even while the
  VMI is Pending (sim.liveupdate);
- the status KubeVirt keeps (`updateStatus`): runStrategy once created, the first state
  change request trimmed once done, startFailure, RestartRequired, printableStatus, and the
  controller's finalizer removed from a final VMI (sim.vmstatus).
Left out: DataVolume templates, volume and memory hotplug, CPU hotplug, migrations.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, cast

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.client.errors import AlreadyExists, ApiError, NotFound
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.builders import vmi_for
from gpu_binder.sim.clocks import CONTROLLER, Clocks
from gpu_binder.sim.fieldmanagers import writes_as
from gpu_binder.sim.instancetypes import (
    InstancetypeError,
    apply_devices,
    instancetype_spec,
    sync_reference,
)
from gpu_binder.sim.liveupdate import LiveUpdate
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.objects import json_copy
from gpu_binder.sim.ratelimit import ItemBackoff
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.runstrategy import (
    START,
    STOP,
    StrategyError,
    run_strategy,
)
from gpu_binder.sim.startrevisions import StartRevisions
from gpu_binder.sim.vmistatus import (
    MIGRATION_TARGET_ANNOTATION,
    VMI_FINALIZER,
    observed,
    with_api_version,
)
from gpu_binder.sim.vmstatus import (
    drop_finalizer,
    printable,
    request_done,
    sync_start_failure,
)

# Creates a VMI through admission: the VMI, or the denial message.
CreateVMI = Callable[[dict[str, Any]], Awaitable[VirtualMachineInstance | str]]

ENDED = ("Succeeded", "Failed")
VM_FINALIZER = VMI_FINALIZER  # the same name on VMs (addVMFinalizer)
GENERATION_ANNOTATION = "kubevirt.io/vm-generation"


class VMController:
    def __init__(
        self,
        client: MemoryClient,
        clocks: Clocks,
        create_vmi: CreateVMI,
        rng: random.Random | None = None,
        *,
        live_update: bool | None = None,
    ) -> None:
        """`live_update`: whether the rollout strategy is LiveUpdate; None reads it from the
        KubeVirt CR, as virt-config does (unset there means LiveUpdate)."""
        self.client = client
        self.clocks = clocks
        self.create_vmi = create_vmi
        self.rng = rng or random.Random(0)
        self._live_update = live_update
        self.start_errors: list[tuple[str, str]] = []
        self._dirty: set[str] = set()
        self._backoff = ItemBackoff()
        self.starts = StartRevisions(client)
        self.rollout = LiveUpdate(client, clocks, self.starts, lambda: self.live_update)
        for vm in client.objects(VirtualMachine):
            self._dirty.add(vm.key)
        client.subscribe(self._on_event, (VirtualMachine, VirtualMachineInstance))

    @property
    def affinity_syncs(self) -> int:
        """VMIs whose affinity or nodeSelector the LiveUpdate sync changed."""
        return self.rollout.syncs

    @property
    def live_update(self) -> bool:
        """IsVMRolloutStrategyLiveUpdate (pkg/virt-config/virt-config.go)."""
        if self._live_update is not None:
            return self._live_update
        for cr in self.client.objects(KubeVirt):
            config = (cr.raw.get("spec") or {}).get("configuration") or {}
            return bool(config.get("vmRolloutStrategy", "LiveUpdate") == "LiveUpdate")
        return True

    def dirty(self, key: str) -> None:
        self._dirty.add(key)

    @writes_as("virt-controller")
    async def step(self) -> int:
        now = self.clocks.clock()
        self._dirty |= self._backoff.due(now)
        writes = 0
        for key in sorted(self._dirty):
            self._dirty.discard(key)
            try:
                writes += await self._sync(key, now)
            except (ApiError, InstancetypeError, StrategyError) as e:
                self.start_errors.append((key, str(e)))
                self._backoff.failed(key, now)
            else:
                self._backoff.forget(key)
        return writes

    # --- sync ---------------------------------------------------------------------------

    async def _sync(self, key: str, now: datetime) -> int:
        namespace, _, name = key.partition("/")
        vm = self.client.peek(VirtualMachine, name, namespace)
        if vm is None:
            self._backoff.drop(key)
            return 0
        if not observed(vm):
            # execute: the first write to a VM not seen at this API version, alone.
            meta = vm.metadata
            written = await modify(
                self.client,
                VirtualMachine,
                meta.name,
                meta.namespace,
                lambda v: None if observed(v) else cast(VirtualMachine, with_api_version(v)),
            )
            return 0 if written is None else 1
        vmi = self.client.peek(VirtualMachineInstance, name, namespace)
        if vmi is not None and not _owned_by(vmi, vm):
            # Another VM's (an older one of this name, being deleted) or no VM's: not
            # claimed (ClaimVirtualMachineInstanceByName); a start would collide with it.
            if vm.metadata.deletion_timestamp is not None:
                return await self._remove_vm_finalizer(vm)
            raise AlreadyExists(f"VMI {key} belongs to another owner")
        if vm.metadata.deletion_timestamp is not None:
            if vmi is None:
                return await self._remove_vm_finalizer(vm)
            writes = await self._stop(vmi)
            status = json_copy(vm.raw.get("status") or {})
            strategy = status.get("runStrategy") or "Halted"
            return writes + await self._update_status(vm, vmi, strategy, status, now)
        writes = 0
        if VM_FINALIZER not in vm.metadata.finalizers:
            vm = await self._add_vm_finalizer(vm)
            writes += 1
        ref = await sync_reference(self.client, vm)
        if ref is not None:
            return writes + await self._write_status(vm, {"instancetypeRef": ref})
        strategy = run_strategy(vm.raw)
        status = json_copy(vm.raw.get("status") or {})
        started_or_stopped = await self._run(vm, vmi, strategy, status, now)
        restart = self.rollout.restart_required(vm, vmi, status)
        # A VMI just created or deleted is expected, not seen: the rest waits for its event
        # (satisfiedExpectations, checked again after syncRunStrategy).
        if self.live_update and not restart and vmi is not None and not started_or_stopped:
            writes += await self.rollout.sync(vm, vmi)
        writes += started_or_stopped
        return writes + await self._update_status(vm, vmi, strategy, status, now)

    async def _run(
        self,
        vm: VirtualMachine,
        vmi: VirtualMachineInstance | None,
        strategy: str,
        status: dict[str, Any],
        now: datetime,
    ) -> int:
        """syncRunStrategy."""
        requests = status.get("stateChangeRequests") or []
        first = requests[0] if requests else {}
        stop_me = (
            vmi is not None and first.get("action") == STOP and first.get("uid") == vmi.metadata.uid
        )
        start_asked = first.get("action") == START
        final = vmi is not None and vmi.phase in ENDED
        if strategy == "Always":
            if vmi is not None:
                return await self._stop(vmi) if stop_me or final else 0
            return await self._start_after_backoff(vm, status, now)
        if strategy == "RerunOnFailure":
            if vmi is not None:
                if not vmi.being_deleted and (stop_me or final):
                    writes = await self._stop(vmi)
                    if vmi.phase == "Failed":
                        status["stateChangeRequests"] = [*requests, {"action": START}]
                    return writes
                return 0
            if not (start_asked or status.get("runStrategy") != strategy):
                return 0
            return await self._start_after_backoff(vm, status, now)
        if strategy == "Manual":
            if vmi is not None:
                return await self._stop(vmi) if stop_me else 0
            return await self._start(vm) if start_asked else 0
        if strategy == "Halted":
            if vmi is None:
                if start_asked:
                    # A paused start of a halted VM: it becomes Always, then starts.
                    await self._set_running(vm, True)
                return 0
            return await self._stop(vmi)
        if strategy == "Once":
            return await self._start(vm) if vmi is None else 0
        if strategy == "WaitAsReceiver":
            return await self._start(vm, receiver=True) if vmi is None else 0
        raise StrategyError(f"unknown runstrategy: {strategy}")

    async def _start_after_backoff(
        self, vm: VirtualMachine, status: dict[str, Any], now: datetime
    ) -> int:
        failure = status.get("startFailure") or {}
        retry = failure.get("retryAfterTimestamp")
        if retry:
            at = datetime.fromisoformat(str(retry).replace("Z", "+00:00"))
            # The controller's own clock decides (startFailureBackoffTimeLeft).
            left = at - self.clocks.now(CONTROLLER)
            if left > timedelta(0):
                self._backoff.wake(vm.key, now + left)
                return 0
        return await self._start(vm)

    async def _start(self, vm: VirtualMachine, *, receiver: bool = False) -> int:
        """startVMI: the VMI the template and instancetype make, through admission."""
        revision = await self.starts.record(vm)
        raw = vmi_for(vm, annotations={GENERATION_ANNOTATION: str(vm.metadata.generation)})
        meta = raw["metadata"]
        meta["finalizers"] = sorted({*meta.get("finalizers", []), VMI_FINALIZER})
        if receiver:
            meta["annotations"][MIGRATION_TARGET_ANNOTATION] = "true"
        spec = instancetype_spec(self.client, vm)
        if spec is not None:
            conflicts = apply_devices(spec, raw["spec"])
            if conflicts:
                raise InstancetypeError(
                    "VMI conflicts with instancetype spec in fields: [" + ", ".join(conflicts) + "]"
                )
        result = await self.create_vmi(raw)
        if isinstance(result, str):
            raise _Denied(result)
        return 1 + revision

    def will_sync_affinity(self, vmi: VirtualMachineInstance) -> bool:
        """Whether this controller's next sync of the VMI's VM changes the VMI's affinity
        or nodeSelector (for the race with the VMI controller's pod, sim.kubevirt)."""
        vm = self.client.peek(VirtualMachine, vmi.vm_name or "", vmi.metadata.namespace)
        if vm is None or not _owned_by(vmi, vm) or vm.metadata.deletion_timestamp is not None:
            return False
        return self.rollout.will_sync(vm, vmi)

    async def _update_status(
        self,
        vm: VirtualMachine,
        vmi: VirtualMachineInstance | None,
        strategy: str,
        status: dict[str, Any],
        now: datetime,
    ) -> int:
        created = vmi is not None
        status["created"] = created
        if status.get("runStrategy") or created:
            status["runStrategy"] = strategy
        requests = status.get("stateChangeRequests") or []
        if requests and request_done(requests[0], vmi):
            status["stateChangeRequests"] = requests[1:]
        if not status.get("stateChangeRequests"):
            status.pop("stateChangeRequests", None)
        sync_start_failure(status, vmi, strategy, self.clocks.now(CONTROLLER), self.rng)
        status["printableStatus"] = printable(vm, vmi, strategy, status)
        writes = 0
        if status != (vm.raw.get("status") or {}):
            writes += await self._write_status(vm, status, replace=True)
        if vmi is not None and vmi.phase in ENDED and VMI_FINALIZER in vmi.metadata.finalizers:
            writes += await self._drop_vmi_finalizer(vmi)
        return writes

    # --- writes -------------------------------------------------------------------------

    async def _stop(self, vmi: VirtualMachineInstance) -> int:
        """stopVMI: delete the VMI (its shutdown follows)."""
        if vmi.being_deleted:
            return 0
        try:
            await self.client.delete(
                VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace
            )
        except NotFound:
            return 0
        return 1

    async def _set_running(self, vm: VirtualMachine, running: bool) -> None:
        def change(current: VirtualMachine) -> VirtualMachine | None:
            raw = wire(current)
            if "runStrategy" in raw["spec"]:
                raw["spec"]["runStrategy"] = "Always" if running else "Halted"
            else:
                raw["spec"]["running"] = running
            return VirtualMachine.from_dict(raw)

        await modify(self.client, VirtualMachine, vm.metadata.name, vm.metadata.namespace, change)

    async def _add_vm_finalizer(self, vm: VirtualMachine) -> VirtualMachine:
        def change(current: VirtualMachine) -> VirtualMachine | None:
            if VM_FINALIZER in current.metadata.finalizers:
                return None
            raw = wire(current)
            raw["metadata"]["finalizers"] = [*current.metadata.finalizers, VM_FINALIZER]
            return VirtualMachine.from_dict(raw)

        meta = vm.metadata
        written = await modify(self.client, VirtualMachine, meta.name, meta.namespace, change)
        return written or vm

    async def _remove_vm_finalizer(self, vm: VirtualMachine) -> int:
        return await drop_finalizer(self.client, VirtualMachine, vm, VM_FINALIZER)

    async def _drop_vmi_finalizer(self, vmi: VirtualMachineInstance) -> int:
        return await drop_finalizer(self.client, VirtualMachineInstance, vmi, VMI_FINALIZER)

    async def _write_status(
        self, vm: VirtualMachine, status: dict[str, Any], *, replace: bool = False
    ) -> int:
        uid = vm.metadata.uid

        def change(current: VirtualMachine) -> VirtualMachine | None:
            if current.metadata.uid != uid:
                return None
            raw = wire(current)
            raw["status"] = status if replace else {**(raw.get("status") or {}), **status}
            return VirtualMachine.from_dict(raw)

        meta = vm.metadata
        written = await modify(
            self.client, VirtualMachine, meta.name, meta.namespace, change, status=True
        )
        return 0 if written is None else 1

    # --- what the store tells the controller ---------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is VirtualMachine:
            self._dirty.add(event.object.key)
        elif kind is VirtualMachineInstance:
            vmi: VirtualMachineInstance = event.object
            # The VM of the VMI's name (getMatchingControllers / the owner).
            self._dirty.add(vmi.key)


class _Denied(ApiError):
    """The VMI's creation was denied by admission."""


def _owned_by(vmi: VirtualMachineInstance, vm: VirtualMachine) -> bool:
    owner = vmi.metadata.owner("VirtualMachine")
    return owner is not None and owner.uid == vm.metadata.uid
