"""The embedded cluster: the binder and webhook on an in-memory API, with KubeVirt, kubelets
and node agents played around them on a virtual clock.

Every part talks through the same client and world as in a real cluster; the cluster only
decides when each runs, so a run is repeatable from its seed.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUBindRequest, GPUDevice
from gpu_binder.binder import PASS_KEY, REQUESTS_KEY, ClientRecorder, Config, Note
from gpu_binder.cache import World
from gpu_binder.client.errors import ApiError
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim import tenants
from gpu_binder.sim.admission import call_pod_webhook, call_webhook, pod_pinner
from gpu_binder.sim.agent import AgentFleet
from gpu_binder.sim.binderhost import BinderHost
from gpu_binder.sim.builders import kubevirt_object, vm_object
from gpu_binder.sim.catalog import GPUModel, gpu_class
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.clocks import Clocks
from gpu_binder.sim.invariants import InvariantChecker
from gpu_binder.sim.kubelet import Kubelet
from gpu_binder.sim.kubevirt import KubeVirtSim
from gpu_binder.sim.nodes import cordon
from gpu_binder.sim.storage import Storage
from gpu_binder.sim.truth import GroundTruth
from gpu_binder.webhook.decision import Admitter

# Steps of KubeVirt and the kubelets between two binder passes, at most (see settle).
KUBEVIRT_STEPS = 4
# Under `race`: the share of rounds in which KubeVirt's controllers act on what changed
# before the binder's passes do, and the seconds each of their steps then takes (a loaded
# scheduler's; more than the ledger check's 1 s at each end, so that an interval of one
# step the binder bills to no one is seen).
KUBEVIRT_FIRST_ODDS = 0.5
KUBEVIRT_STEP_SECONDS = 3.0


class KeepingRecorder(ClientRecorder):
    """The binder's Event writer, keeping every note besides: the run's figures are counted
    from them (`notes`)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.kept: list[Note] = []

    async def record(self, note: Note, now: datetime) -> None:
        self.kept.append(note)
        await super().record(note, now)


@dataclass(frozen=True)
class ClassDef:
    name: str
    resource: str
    model: GPUModel
    policy: str = "Pack"
    topology: str = "Node"
    release_after: str | None = None
    pinning: str = "Device"


@dataclass
class Stats:
    """What the webhook and binder were asked and answered, counted as the API server saw
    it (see `gpu-binder sim --help` for what each figure of a run means)."""

    # VMI creations the webhook admitted with the set the VM had (no bind request), those it
    # admitted once the binder answered a bind request, and those it denied (any reason).
    vmis_admitted_pinned: int = 0
    vmis_admitted_after_request: int = 0
    vmis_denied: int = 0
    # Bind requests the webhook created, by the answer it got: Bound, Failed (the binder's
    # refusal: no room, a set that cannot move...), or none in time (the binder was down).
    requests_bound: int = 0
    requests_failed: int = 0
    requests_unanswered: int = 0
    passes: int = 0
    conflicts: int = 0
    pass_errors: int = 0
    # Distinct VMs (namespace/name) whose bind request failed at least once.
    vms_refused: set[str] = field(default_factory=set)


@dataclass
class Log:
    """What happened besides the binder's Events, for the demo's view."""

    lines: list[tuple[datetime, str, str]] = field(default_factory=list)

    def add(self, t: datetime, who: str, text: str) -> None:
        self.lines.append((t, who, text))


class Cluster:
    def __init__(
        self,
        classes: list[ClassDef],
        config: Config | None = None,
        seed: int = 1,
        sweep_always: bool = False,
        *,
        skew: float = 0.0,
        live_update: bool | None = None,
        race: bool = False,
    ) -> None:
        """`skew`: how far (seconds, either way) the clocks of nodes and of virt-controller
        are off the binder's (sim.clocks); `live_update`: KubeVirt's vmRolloutStrategy is
        LiveUpdate (None: as the KubeVirt CR says; unset there, LiveUpdate, its default);
        `race`: KubeVirt's controllers and the binder both watch what users do, and either
        may act on it first, KubeVirt's steps then taking time (settle)."""
        self.clock = VirtualClock()
        self.race = random.Random(seed ^ 0x5EED) if race else None
        self.t0 = self.clock()
        # The sim's binder stamps its sightings of VMIs (World.seen_running) with its own
        # clock, as the manager's does.
        self.host = BinderHost(self.clock.now, config, seed=seed, on_shown=self._shown)
        self.client = self.host.client
        self.clocks = Clocks(self.clock.now, skew, seed)
        self.storage = Storage(self.clock.now)
        self.config = self.host.config
        self.classes = {c.name: c for c in classes}
        self.stats = Stats()
        self.log = Log()
        self.binder_up = True
        # Every pass an exhaustive sweep: the reference incremental passes must match.
        self.sweep_always = sweep_always
        self.dirty_pass = True
        self.dirty_requests = False
        self._in_binder = False
        self._last_denial: dict[str, str] = {}
        self.next_resync = self.clock() + self.config.resync
        for c in classes:
            self.client.put(
                gpu_class(
                    c.name,
                    c.model,
                    c.resource,
                    pinning=c.pinning,
                    placement={"policy": c.policy, "topology": c.topology},
                    reservation={"releaseAfterStopped": c.release_after} if c.release_after else {},
                )
            )
        self.client.put(
            KubeVirt.from_dict(
                kubevirt_object(self.config.kubevirt_name, self.config.kubevirt_namespace)
            )
        )
        self.recorder = KeepingRecorder(self.client)
        self.reconciler = self.host.reconciler(self.recorder)
        self.admitter = Admitter(self.world, self.client, self.config, self.clock.now)
        self.pod_pinner = pod_pinner(self.world, self.config, self.clock.now)
        self.fleet = AgentFleet(self.client, self.clock.now, node_clock=self.clocks.now)
        self.kubevirt = KubeVirtSim(
            self.client,
            self.clock.now,
            self.admit,
            admit_pod=self.admit_pod,
            clocks=self.clocks,
            storage=self.storage,
            seed=seed,
            live_update=live_update,
        )
        self.kubelet = Kubelet(self.client, self.clocks)
        self.checker = InvariantChecker(self.client)
        self.truth = GroundTruth(self.client, self.clock.now)

    # --- the binder -----------------------------------------------------------------------

    @property
    def world(self) -> World:
        return self.host.world

    def _shown(self, ev: WatchEvent[Any]) -> None:
        if isinstance(ev.object, GPUBindRequest):
            # A request enqueues the requests key alone: the webhook waits for its answer.
            self.dirty_requests = self.dirty_requests or ev.type != "DELETED"
            return
        self.dirty_pass = True

    def restart_binder(self) -> None:
        """A new leader: caches listed afresh, and nothing remembered from the old one."""
        self.host.restart()
        self.reconciler = self.host.reconciler(self.recorder)
        self.admitter = Admitter(self.world, self.client, self.config, self.clock.now)
        self.pod_pinner = pod_pinner(self.world, self.config, self.clock.now)
        self.dirty_pass = True

    async def reconcile(self, key: str) -> None:
        if not self.binder_up:
            return
        try:
            if self.sweep_always:
                # The reference: every pass a sweep of every key, trusting no memory of
                # keys found clean.
                self.world.needs_full = True
            result = await self.reconciler.reconcile(key, True if self.sweep_always else None)
        except ApiError as e:
            self.stats.pass_errors += 1
            self.log.add(self.clock(), "binder", f"pass failed: {e}")
            self.dirty_pass = True
            return
        self.stats.passes += 1
        self.stats.conflicts += result.conflicts
        if result.aborted:
            self.dirty_pass = True  # requeued after 100 ms
        elif key == REQUESTS_KEY and result.requeue_after is not None:
            self.dirty_requests = True  # more requests than one pass answers
        elif result.requeue_after == timedelta(0):
            self.dirty_pass = True  # more orders than one pass binds

    async def settle(self, rounds: int = 60) -> None:
        """Run binder, agents, KubeVirt and kubelets until none has anything left to do."""
        for _ in range(rounds):
            busy = False
            # virt-controller creates a started VM's VMI as soon as its watch shows the VM
            # (vm.go startVMI), maybe before the binder's next pass: the bind is then the
            # webhook's request's, by a requests pass, and the pod may be scheduled and run,
            # seconds later, before a full pass sees the GPU bound; the binder's watch then
            # brings it the VMI's versions after the pod ran.
            kubevirt_first = self.race is not None and self.race.random() < KUBEVIRT_FIRST_ODDS
            writes = await self._kubevirt_steps(KUBEVIRT_STEP_SECONDS) if kubevirt_first else 0
            if self.dirty_requests and self.binder_up:
                self.dirty_requests = False
                await self.reconcile(REQUESTS_KEY)
                busy = True
            if self.dirty_pass and self.binder_up:
                self.dirty_pass = False
                await self.reconcile(PASS_KEY)
                busy = True
            writes += await self.fleet.step()
            if not kubevirt_first:
                writes += await self._kubevirt_steps()
            if not busy and writes == 0:
                return

    async def _kubevirt_steps(self, seconds: float = 0.0) -> int:
        """KubeVirt's controllers, the scheduler and the kubelets take a handful of steps
        for what one binder pass reacts to (a start: the VMI, its pod, its node, Running):
        they go on until they are done or KUBEVIRT_STEPS ran, `seconds` passing after
        each, and the binder passes over what they made of it (it sees each step's
        writes; it does not run between each two). The writes they made."""
        writes = 0
        for _ in range(KUBEVIRT_STEPS):
            made = await self.kubevirt.step() + await self.kubelet.step()
            writes += made
            if not made:
                break
            if seconds:
                self.clock.advance(seconds)
        return writes

    async def tick(self, seconds: float) -> None:
        """Time passes: grace periods run out, backoffs end, the binder resyncs."""
        self.clock.advance(seconds)
        if self.clock() >= self.next_resync:
            self.next_resync = self.clock() + self.config.resync
            self.dirty_pass = True
        await self.settle()

    def check(self) -> list[str]:
        return self.checker.check(records=self.binder_up)

    def notes(self) -> list[Note]:
        return list(self.recorder.kept)

    # --- the webhook ----------------------------------------------------------------------

    async def admit(self, vmi: dict[str, Any]) -> dict[str, Any] | str:
        """The API server calling the webhook; a binder that is down never answers."""
        admission = await call_webhook(self.admitter, self.client, vmi, self._answer_requests)
        key = f"{vmi['metadata']['namespace']}/{vmi['metadata']['name']}"
        stats, request = self.stats, admission.request
        if request is not None:
            if request.status.phase == "Bound":
                stats.requests_bound += 1
            elif request.status.phase == "Failed":
                stats.requests_failed += 1
                stats.vms_refused.add(key)
            else:
                stats.requests_unanswered += 1
        if isinstance(admission.outcome, str):
            stats.vmis_denied += 1
            # KubeVirt retries a denied start within moments, many times: the log says a
            # denial once, until its reason changes.
            if self._last_denial.get(key) != admission.outcome:
                self._last_denial[key] = admission.outcome
                self.log.add(self.clock(), "webhook", f"denied {key}: {admission.outcome}")
        else:
            self._last_denial.pop(key, None)
            if request is None:
                stats.vmis_admitted_pinned += 1
            else:
                stats.vmis_admitted_after_request += 1
            self.log.add(self.clock(), "webhook", f"admitted {key}")
        return admission.outcome

    async def admit_pod(self, pod: dict[str, Any]) -> dict[str, Any] | str:
        """The API server calling the pod webhooks on a Pod CREATE. gpu-binder's pod webhook
        (branch kv-podpin, gpu_binder.webhook.pods) is called where it exists; without it,
        as on today's main, every pod is admitted as KubeVirt rendered it."""
        if self.pod_pinner is None:
            return pod
        return call_pod_webhook(self.pod_pinner, pod)

    async def _answer_requests(self) -> None:
        await self.reconcile(REQUESTS_KEY)
        self.dirty_requests = False

    # --- what users and admins do -----------------------------------------------------------

    async def add_node(
        self, name: str, cls: str, gpus: int = 8, labels: dict[str, str] | None = None
    ) -> None:
        await self.fleet.add_node(name, gpus, self.classes[cls].model, labels)

    def resources(self, gpus: dict[str, int]) -> list[str]:
        """One device name per GPU ordered: the classes' resourceNames."""
        return [self.classes[c].resource for c, n in gpus.items() for _ in range(n)]

    def add_vm(
        self,
        namespace: str,
        name: str,
        gpus: dict[str, int],
        running: bool = False,
        annotations: dict[str, str] | None = None,
        *,
        run_strategy: str | None = None,
        instancetype: str | None = None,
        data_volume: bool = False,
    ) -> None:
        """A VM ordering gpus in its template, or none there and its instancetype's; with
        data_volume its disk is a new DataVolume waiting for its first consumer."""
        dv = f"{name}-rootdisk" if data_volume else None
        if dv is not None:
            self.storage.add_waiting(namespace, dv)
        vm = vm_object(
            name,
            namespace,
            [] if instancetype else self.resources(gpus),
            running=running,
            run_strategy=run_strategy,
            annotations=annotations,
            instancetype=instancetype,
            data_volume=dv,
        )
        self.client.put(vm)

    def add_instancetype(self, name: str, gpus: dict[str, int]) -> None:
        """A cluster instancetype giving these GPUs (or new GPUs for one of that name: VMs
        that recorded a revision of it keep the old)."""
        tenants.put_instancetype(self.client, name, self.resources(gpus))

    async def edit_template(self, key: str, gpus: dict[str, int]) -> bool:
        """A tenant edits the VM's template to order gpus instead (a running VMI keeps what
        it has; the next start runs the new template); False when the VM is gone."""
        edited = await tenants.edit_devices(self.client, key, self.resources(gpus))
        await self.settle()
        return edited

    async def set_running(self, key: str, running: bool) -> str | None:
        """`virtctl start` / `stop`; the refusal (the VM runs already, its strategy does not
        take the request...), or None."""
        ns, _, name = key.partition("/")
        refused = await self.kubevirt.set_running(ns, name, running)
        await self.settle()
        return refused

    async def set_run_strategy(self, key: str, strategy: str) -> None:
        """A tenant sets the VM's spec.runStrategy (kubectl patch)."""
        await tenants.set_run_strategy(self.client, key, strategy)
        await self.settle()

    async def guest_ends(self, key: str, failed: bool = False) -> None:
        """The guest of the VM's VMI powers off (or crashes): the VMI ends on its own."""
        ns, _, name = key.partition("/")
        phase, reason = ("Failed", "GuestCrashed") if failed else ("Succeeded", "")
        await self.kubelet.finish(ns, name, phase, reason)
        await self.settle()

    async def delete_vm(self, key: str) -> None:
        ns, _, name = key.partition("/")
        if self.client.peek(VirtualMachine, name, ns) is not None:
            await self.client.delete(VirtualMachine, name, ns)
        await self.settle()

    async def annotate_vm(self, key: str, annotations: dict[str, str]) -> None:
        ns, _, name = key.partition("/")
        vm = self.client.peek(VirtualMachine, name, ns)
        if vm is not None:
            meta = vm.metadata.model_copy(
                update={"annotations": {**vm.metadata.annotations, **annotations}}
            )
            self.client.put(VirtualMachine.from_dict({**vm.to_dict(), "metadata": meta.to_dict()}))
        await self.settle()

    async def set_node(
        self, name: str, ready: bool | None = None, cordoned: bool | None = None
    ) -> None:
        if ready is False:
            await self.fleet.lose_node(name)
        elif ready is True:
            await self.fleet.restore_node(name)
        if cordoned is not None:
            await cordon(self.client, name, cordoned)
        await self.settle()

    async def set_health(self, device: str, healthy: bool, message: str = "") -> None:
        self.fleet.set_health(device, healthy, message)
        await self.settle()

    async def delete_device(self, device: str) -> None:
        """An admin deletes a GPUDevice; the finalizer keeps it while a VMI runs on it."""
        if self.client.peek(GPUDevice, device) is not None:
            await self.client.delete(GPUDevice, device)
        await self.settle()

    async def remove_gpu(self, device: str) -> None:
        """The GPU behind a device is gone: its agent deletes the GPUDevice."""
        if device in self.world.devices.by_name:
            with contextlib.suppress(KeyError):
                self.fleet.remove_gpu(device)
        await self.settle()

    async def set_plugin(self, node: str, up: bool) -> None:
        """The node's device plugin stops (or starts again) serving its slots."""
        self.fleet.set_plugin(node, up)
        await self.settle()

    async def start_unmanaged(self, raw: dict[str, Any]) -> None:
        """A VMI started before gpu-binder was installed (while its webhooks are down the
        API server refuses GPU VMIs and pods: failurePolicy Fail): neither the VMI nor its
        pods are admitted by them, and no binder looks until it runs."""
        pinner, self.pod_pinner, up = self.pod_pinner, None, self.binder_up
        self.binder_up = False
        try:
            vmi = await self.kubevirt.create_vmi(raw, admitted=False)
            for _ in range(30):  # KubeVirt, the scheduler and the kubelet run it meanwhile
                await self.tick(1)
                if isinstance(vmi, str) or self._phase_of(vmi) in ("Running", "Succeeded", ""):
                    break
        finally:
            self.pod_pinner, self.binder_up = pinner, up
        await self.settle()

    def _phase_of(self, vmi: VirtualMachineInstance) -> str:
        found = self.client.peek(VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace)
        return found.phase if found is not None else ""


def elapsed(c: Cluster) -> timedelta:
    return c.clock() - c.t0
