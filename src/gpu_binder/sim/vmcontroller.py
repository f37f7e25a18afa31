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
  ControllerRevision; the instancetype's devices applied, `ApplyToVMI`; the controller's
  finalizer) and is created through admission; a failed start is retried with the
  workqueue's backoff (sim.ratelimit), a VMI that failed before it ran with the start
  failure backoff (`syncStartFailureStatus`, `calculateStartBackoffTime`);
- with the LiveUpdate rollout strategy (KubeVirt's default) and no RestartRequired
  (`syncRestartRequired`: the template spec, instancetype applied, changed since the start
  beyond what is live-updatable), the VMI's affinity and nodeSelector are made the
  template's (`handleAffinityChangeRequest`, `VMIAffinityPatch`,
  `VMNodeSelectorPatch`) — replaced, or removed when the template has none, even while the
  VMI is Pending;
- the status KubeVirt keeps (`updateStatus`): runStrategy once created, the first state
  change request trimmed once done, startFailure, RestartRequired, printableStatus, and the
  controller's finalizer removed from a final VMI.
Left out: DataVolume templates, volume and memory hotplug, CPU hotplug, migrations.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, cast

from gpu_binder.api.instancetype import ControllerRevision
from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.client.errors import AlreadyExists, ApiError, NotFound
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.builders import iso, owner_reference, vmi_for
from gpu_binder.sim.clocks import CONTROLLER, Clocks
from gpu_binder.sim.instancetypes import (
    InstancetypeError,
    apply_devices,
    instancetype_spec,
    sync_reference,
    with_instancetype,
)
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.objects import json_copy
from gpu_binder.sim.ratelimit import ItemBackoff
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.runstrategy import (
    AUTO_RESTART,
    START,
    STOP,
    StrategyError,
    run_strategy,
)
from gpu_binder.sim.vmistatus import (
    MIGRATION_TARGET_ANNOTATION,
    VMI_FINALIZER,
    observed,
    with_api_version,
)

# Creates a VMI through admission: the VMI, or the denial message.
CreateVMI = Callable[[dict[str, Any]], Awaitable[VirtualMachineInstance | str]]

ENDED = ("Succeeded", "Failed")
VM_FINALIZER = VMI_FINALIZER  # the same name on VMs (addVMFinalizer)
GENERATION_ANNOTATION = "kubevirt.io/vm-generation"
START_REVISION_PREFIX = "revision-start-vm-"
RESTART_REQUIRED = "RestartRequired"
# vm.go: defaultMaxCrashLoopBackoffDelaySeconds.
MAX_START_FAILURE_DELAY = 300
# Template fields the LiveUpdate rollout strategy changes on a running VMI
# (syncRestartRequired): no restart is needed when only they changed.
_LIVE_UPDATABLE = ("nodeSelector", "affinity", "tolerations")


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
        self.affinity_syncs = 0
        self.start_errors: list[tuple[str, str]] = []
        self._dirty: set[str] = set()
        self._backoff = ItemBackoff()
        # The start revisions of each VM (by uid): name -> revision (generation).
        self._starts: dict[str, dict[str, int]] = {}
        for rev in client.objects(ControllerRevision):
            self._on_revision(rev, deleted=False)
        for vm in client.objects(VirtualMachine):
            self._dirty.add(vm.key)
        client.subscribe(self._on_event)

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
        restart = self._restart_required(vm, vmi, status)
        # A VMI just created or deleted is expected, not seen: the rest waits for its event
        # (satisfiedExpectations, checked again after syncRunStrategy).
        if self.live_update and not restart and vmi is not None and not started_or_stopped:
            writes += await self._sync_affinity(vm, vmi)
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
        revision = await self._record_start(vm)
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

    async def _record_start(self, vm: VirtualMachine) -> int:
        """createVMRevision: the VM's spec at this start, older start revisions deleted."""
        name = f"{START_REVISION_PREFIX}{vm.metadata.uid}-{vm.metadata.generation}"
        writes = 0
        for old in sorted(self._starts.get(vm.metadata.uid, {})):
            if old == name:
                return writes
            try:
                await self.client.delete(ControllerRevision, old, vm.metadata.namespace)
                writes += 1
            except NotFound:
                pass
        spec = json_copy(vm.raw.get("spec") or {})
        ref = ((vm.raw.get("status") or {}).get("instancetypeRef") or {}).get(
            "controllerRevisionRef"
        ) or {}
        if isinstance(spec.get("instancetype"), dict) and ref.get("name"):
            spec["instancetype"]["revisionName"] = ref["name"]
        try:
            await self.client.create(
                ControllerRevision.from_dict(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ControllerRevision",
                        "metadata": {
                            "name": name,
                            "namespace": vm.metadata.namespace,
                            "ownerReferences": [owner_reference(vm)],
                        },
                        "data": {"spec": spec},
                        "revision": vm.metadata.generation,
                    }
                )
            )
        except AlreadyExists:
            return writes
        return writes + 1

    def _restart_required(
        self, vm: VirtualMachine, vmi: VirtualMachineInstance | None, status: dict[str, Any]
    ) -> bool:
        """syncRestartRequired: whether the template, its instancetype applied, changed
        since the VMI started in more than the live-updatable fields; sets or clears the
        condition in status."""
        last = self._start_spec(vm) if vmi is not None else None
        if last is None:
            _clear_condition(status, RESTART_REQUIRED)
            return False
        if last.get("instancetype"):
            before = self._template(VirtualMachine.from_dict({**vm.raw, "spec": last}))
        else:
            before = (last.get("template") or {}).get("spec") or {}
        current = self._template(vm)
        if self.live_update:
            before = {k: v for k, v in before.items() if k not in _LIVE_UPDATABLE}
            current = {k: v for k, v in current.items() if k not in _LIVE_UPDATABLE}
        if before != current:
            _set_condition(
                status,
                RESTART_REQUIRED,
                "a non-live-updatable field was changed in the template spec",
                self.clocks.now(CONTROLLER),
            )
            return True
        _clear_condition(status, RESTART_REQUIRED)
        return False

    def _template(self, vm: VirtualMachine) -> dict[str, Any]:
        """The template spec a start would run (its instancetype applied); not a copy when
        the VM names no instancetype: read it, never change it."""
        spec = vm.raw.get("spec") or {}
        template = (spec.get("template") or {}).get("spec") or {}
        if not spec.get("instancetype"):
            return template
        return with_instancetype(self.client, vm)

    def _start_spec(self, vm: VirtualMachine) -> dict[str, Any] | None:
        """getLastVMRevisionSpec: the spec of the VM's latest start revision."""
        found = self._starts.get(vm.metadata.uid)
        if not found:
            return None
        name = max(found, key=found.__getitem__)
        rev = self.client.peek(ControllerRevision, name, vm.metadata.namespace)
        spec = rev.data.get("spec") if rev is not None else None
        return spec if isinstance(spec, dict) else None

    def will_sync_affinity(self, vmi: VirtualMachineInstance) -> bool:
        """Whether this controller's next sync of the VMI's VM changes the VMI's affinity
        or nodeSelector (for the race with the VMI controller's pod, sim.kubevirt)."""
        vm = self.client.peek(VirtualMachine, vmi.vm_name or "", vmi.metadata.namespace)
        if vm is None or not _owned_by(vmi, vm) or vm.metadata.deletion_timestamp is not None:
            return False
        if not self.live_update or vmi.being_deleted:
            return False
        status = json_copy(vm.raw.get("status") or {})
        conditions = {c.get("type") for c in status.get("conditions") or []}
        if RESTART_REQUIRED in conditions or self._restart_required(vm, vmi, status):
            return False
        return self._affinity_wanted(vm, vmi) is not None

    def _affinity_wanted(
        self, vm: VirtualMachine, vmi: VirtualMachineInstance
    ) -> dict[str, Any] | None:
        """The template's affinity and nodeSelector where the VMI's differ, else None."""
        template = self._template(vm)
        wanted = {f: template.get(f) for f in ("affinity", "nodeSelector")}
        have = {f: (vmi.raw.get("spec") or {}).get(f) for f in ("affinity", "nodeSelector")}
        if all(_semantic(wanted[f]) == _semantic(have[f]) for f in wanted):
            return None
        return wanted

    async def _sync_affinity(self, vm: VirtualMachine, vmi: VirtualMachineInstance) -> int:
        """handleAffinityChangeRequest: the VMI's affinity and nodeSelector become the
        template's (instancetype applied), replaced or removed."""
        if vmi.being_deleted:
            return 0
        wanted = self._affinity_wanted(vm, vmi)
        if wanted is None:
            return 0
        uid = vmi.metadata.uid

        def patch(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.metadata.uid != uid:
                return None
            raw = wire(current)
            for f, value in wanted.items():
                if value is None:
                    raw["spec"].pop(f, None)
                else:
                    raw["spec"][f] = json_copy({"v": value})["v"]
            return VirtualMachineInstance.from_dict(raw)

        written = await modify(
            self.client, VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace, patch
        )
        if written is None:
            return 0
        self.affinity_syncs += 1
        return 1

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
        if requests and _request_done(requests[0], vmi):
            status["stateChangeRequests"] = requests[1:]
        if not status.get("stateChangeRequests"):
            status.pop("stateChangeRequests", None)
        self._start_failure(status, vmi, strategy)
        status["printableStatus"] = _printable(vm, vmi, strategy, status)
        writes = 0
        if status != (vm.raw.get("status") or {}):
            writes += await self._write_status(vm, status, replace=True)
        if vmi is not None and vmi.phase in ENDED and VMI_FINALIZER in vmi.metadata.finalizers:
            writes += await self._drop_vmi_finalizer(vmi)
        return writes

    def _start_failure(
        self, status: dict[str, Any], vmi: VirtualMachineInstance | None, strategy: str
    ) -> None:
        """syncStartFailureStatus."""
        ran = vmi is not None and any(
            t.get("phase") == "Running"
            for t in (vmi.raw.get("status") or {}).get("phaseTransitionTimestamps") or ()
        )
        if ran or strategy not in AUTO_RESTART:
            status.pop("startFailure", None)
            return
        if vmi is None or vmi.phase not in ENDED:
            return
        failure = status.get("startFailure") or {}
        if failure.get("lastFailedVMIUID") == vmi.metadata.uid:
            return
        count = int(failure.get("consecutiveFailCount") or 0) + 1
        delay = start_backoff(count, MAX_START_FAILURE_DELAY, self.rng)
        status["startFailure"] = {
            "lastFailedVMIUID": vmi.metadata.uid,
            "retryAfterTimestamp": iso(self.clocks.now(CONTROLLER) + timedelta(seconds=delay)),
            "consecutiveFailCount": count,
        }

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
        return await _drop_finalizer(self.client, VirtualMachine, vm, VM_FINALIZER)

    async def _drop_vmi_finalizer(self, vmi: VirtualMachineInstance) -> int:
        return await _drop_finalizer(self.client, VirtualMachineInstance, vmi, VMI_FINALIZER)

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
        elif kind is ControllerRevision:
            self._on_revision(event.object, deleted=event.type == "DELETED")

    def _on_revision(self, rev: ControllerRevision, deleted: bool) -> None:
        if not rev.metadata.name.startswith(START_REVISION_PREFIX):
            return
        owner = rev.metadata.owner("VirtualMachine")
        if owner is None:
            return
        starts = self._starts.setdefault(owner.uid, {})
        if deleted:
            starts.pop(rev.metadata.name, None)
            if not starts:
                del self._starts[owner.uid]
        else:
            starts[rev.metadata.name] = rev.revision


class _Denied(ApiError):
    """The VMI's creation was denied by admission."""


def start_backoff(count: int, max_delay: int, rng: random.Random) -> int:
    """vm.go calculateStartBackoffTime: 10 s × failures², plus up to half again, capped."""
    interval = max(max_delay // 30, 10)
    delay = interval * max(count, 1) ** 2
    delay += rng.randrange(delay // 2 + 1)
    return min(delay, max_delay)


def _owned_by(vmi: VirtualMachineInstance, vm: VirtualMachine) -> bool:
    owner = vmi.metadata.owner("VirtualMachine")
    return owner is not None and owner.uid == vm.metadata.uid


def _request_done(request: dict[str, Any], vmi: VirtualMachineInstance | None) -> bool:
    """isTrimFirstChangeRequestNeeded."""
    if request.get("action") == STOP:
        return vmi is None or not request.get("uid") or request["uid"] != vmi.metadata.uid
    if request.get("action") == START:
        return vmi is not None and not vmi.being_deleted and vmi.phase not in ENDED
    return False


def _printable(
    vm: VirtualMachine, vmi: VirtualMachineInstance | None, strategy: str, status: dict[str, Any]
) -> str:
    """setPrintableStatus, first match wins (of the statuses the sim can reach)."""
    final = vmi is not None and vmi.phase in ENDED
    if vm.metadata.deletion_timestamp is not None:
        return "Terminating"
    if vmi is not None and not final and vmi.being_deleted:
        return "Stopping"
    if vmi is not None and vmi.phase == "Running":
        return "Running"
    if vmi is not None and vmi.phase in ("", "Pending", "Scheduling", "Scheduled"):
        return "Starting"
    failures = int((status.get("startFailure") or {}).get("consecutiveFailCount") or 0)
    if (vmi is None or final) and failures > 0 and strategy in AUTO_RESTART:
        return "CrashLoopBackOff"
    if vmi is None or final:
        return "Stopped"
    if strategy == "WaitAsReceiver":
        return "WaitingForReceiver"
    return "Unknown"


def _semantic(value: Any) -> Any:
    """equality.Semantic: an empty map or list is what an absent one is."""
    return None if value in (None, {}, []) else value


def _set_condition(status: dict[str, Any], type_: str, message: str, now: datetime) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != type_]
    old = next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old else iso(now)
    conditions.append(
        {"type": type_, "status": "True", "message": message, "lastTransitionTime": since}
    )
    status["conditions"] = conditions


def _clear_condition(status: dict[str, Any], type_: str) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != type_]
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)


async def _drop_finalizer(client: MemoryClient, kind: type[Any], obj: Any, finalizer: str) -> int:
    if finalizer not in obj.metadata.finalizers:
        return 0
    uid = obj.metadata.uid

    def change(current: Any) -> Any:
        if current.metadata.uid != uid or finalizer not in current.metadata.finalizers:
            return None
        raw = wire(current)
        raw["metadata"]["finalizers"] = [f for f in current.metadata.finalizers if f != finalizer]
        return kind.from_dict(raw)

    written = await modify(client, kind, obj.metadata.name, obj.metadata.namespace, change)
    return 0 if written is None else 1
