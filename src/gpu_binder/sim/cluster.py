"""The embedded cluster: the binder and webhook on an in-memory API with KubeVirt, kubelets
and node agents played around them, on a virtual clock, one event at a time.

Every piece talks through the same client and world as in a real cluster; the cluster
only decides when each runs, so a run is repeatable from its seed.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    DeviceMatch,
    GPUBindRequest,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceSpec,
    Phase,
    PlacementSpec,
    ReservationSpec,
    device_name,
)
from gpu_binder.binder.config import Config
from gpu_binder.binder.events import ClientRecorder
from gpu_binder.binder.plan import Note
from gpu_binder.binder.reconciler import PASS_KEY, REQUESTS_KEY, Reconciler, Result
from gpu_binder.binder.world import World, slot_resource
from gpu_binder.client.errors import ApiError, NotFound
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.jsonpatch import apply_patch
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook.decision import Admitter, NeedsRequest


class VirtualClock:
    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@dataclass(frozen=True)
class ClassDef:
    name: str
    resource: str
    device_id: str
    model: str
    policy: str = "Pack"
    topology: str = "Node"
    release_after: str | None = None


@dataclass
class Stats:
    binds: int = 0
    moves: int = 0
    rebinds: int = 0
    adoptions: int = 0
    requests_answered: int = 0
    requests_failed: int = 0
    starts_denied: int = 0
    starts_failed: int = 0
    conflicts: int = 0
    passes: int = 0


@dataclass
class Log:
    """What happened, for the demo's decision log."""

    lines: list[tuple[datetime, str, str]] = field(default_factory=list)

    def add(self, t: datetime, who: str, text: str) -> None:
        self.lines.append((t, who, text))


class Cluster:
    def __init__(
        self,
        classes: list[ClassDef],
        config: Config | None = None,
        seed: int = 1,
        on_change: Callable[[type[Any], WatchEvent[Any]], None] | None = None,
    ) -> None:
        self.clock = VirtualClock()
        self.t0 = self.clock()
        self.client = MemoryClient(clock=self.clock, seed=seed)
        self.config = config or Config()
        self.classes = classes
        self.stats = Stats()
        self.log = Log()
        self.binder_up = True
        self.dirty_pass = False
        self.dirty_requests = False
        self.next_resync = self.clock() + self.config.resync
        self._names = itertools.count(1)
        # KubeVirt backs off a denied start; the cluster retries it after this time.
        self.retry_at: dict[str, datetime] = {}
        self._on_change = on_change
        self.world = World()
        self.client.subscribe(self._event)
        self.recorder = ClientRecorder(self.client)
        self.reconciler = self._new_reconciler()
        self.admitter = Admitter(self.world, self.client, self.config, self.clock)
        for c in classes:
            self.client.put(
                GPUClass(
                    metadata=ObjectMeta(name=c.name),
                    spec=GPUClassSpec(
                        resource_name=c.resource,
                        match=DeviceMatch(vendor_id="0x10de", device_ids=(c.device_id,)),
                        placement=PlacementSpec(policy=c.policy, topology=c.topology),
                        reservation=ReservationSpec(release_after_stopped=c.release_after),
                    ),
                )
            )
        self.client.put(_kubevirt_cr(self.config))

    # --- plumbing ---------------------------------------------------------------------

    def _new_reconciler(self) -> Reconciler:
        return Reconciler(self.client, self.world, self.config, self.clock, self.recorder)

    def _event(self, kind: type[Any], ev: WatchEvent[Any]) -> None:
        self.world.apply(ev)
        if kind is GPUBindRequest:
            self.dirty_requests = True
        if kind.__name__ != "Event":
            self.dirty_pass = True
        if self._on_change is not None:
            self._on_change(kind, ev)

    def restart_binder(self) -> None:
        """A new leader: fresh caches listed from the API, and no memory of the old one."""
        self.world = World()
        for kind in (
            GPUClass,
            GPUDevice,
            Node,
            VirtualMachine,
            VirtualMachineInstance,
            GPUBindRequest,
        ):
            for obj in self.client.objects(kind):
                self.world.apply(WatchEvent("ADDED", obj))
        from gpu_binder.api.kinds import KubeVirt
        from gpu_binder.api.types import GPUUsageRecord

        for k in (GPUUsageRecord, KubeVirt):
            for obj in self.client.objects(k):
                self.world.apply(WatchEvent("ADDED", obj))
        self.reconciler = self._new_reconciler()
        self.admitter = Admitter(self.world, self.client, self.config, self.clock)
        self.dirty_pass = True

    async def reconcile(self, key: str = PASS_KEY, limit: int = 10) -> None:
        """Run the binder until it has nothing more to do now (conflicts retried)."""
        if not self.binder_up:
            return
        for _ in range(limit):
            self.dirty_pass = False
            try:
                result = await self.reconciler.reconcile(key)
            except ApiError as e:
                self.log.add(self.clock(), "binder", f"pass failed: {e}")
                continue
            self._count(result)
            if not result.aborted and not self.dirty_pass:
                break
            key = PASS_KEY

    def _count(self, result: Result) -> None:
        self.stats.passes += 1
        self.stats.conflicts += result.conflicts

    async def settle(self) -> None:
        if self.dirty_requests:
            self.dirty_requests = False
            await self.reconcile(REQUESTS_KEY)
        if self.dirty_pass:
            await self.reconcile(PASS_KEY)

    async def tick(self, seconds: float) -> None:
        """Time passes: agents reset devices, kubelets start VMIs, the binder resyncs."""
        self.clock.advance(seconds)
        await self.agents_reset()
        await self.kubelet()
        if self.clock() >= self.next_resync:
            self.next_resync = self.clock() + self.config.resync
            self.dirty_pass = True
        await self.settle()
        await self.kubevirt()
        await self.settle()

    # --- nodes and agents -------------------------------------------------------------

    def add_node(
        self,
        name: str,
        gpus: dict[str, int],
        labels: dict[str, str] | None = None,
        ready: bool = True,
    ) -> None:
        slot = 0
        allocatable: dict[str, str] = {"cpu": "128", "memory": "1Ti"}
        for cls_name, count in gpus.items():
            c = next(c for c in self.classes if c.name == cls_name)
            for _ in range(count):
                pci = f"0000:{0x10 + slot:02x}:00.0"
                d = GPUDevice(
                    metadata=ObjectMeta(name=device_name(name, pci)),
                    spec=GPUDeviceSpec(
                        node_name=name,
                        pci_address=pci,
                        slot=slot,
                        device_id=c.device_id,
                        model=c.model,
                        numa_node=slot // 4,
                        driver="vfio-pci",
                        iommu_group=slot + 10,
                    ),
                )
                self.client.put(d)
                allocatable[slot_resource(d)] = "1"
                slot += 1
        self.client.put(
            Node.from_dict(
                {
                    "metadata": {
                        "name": name,
                        "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                    },
                    "spec": {},
                    "status": {
                        "conditions": [_ready(ready, self.clock())],
                        "allocatable": allocatable,
                    },
                }
            )
        )

    async def set_node(
        self, name: str, ready: bool | None = None, cordon: bool | None = None
    ) -> None:
        node = self.client.peek(Node, name)
        if node is None:
            return
        raw = node.to_dict()
        if ready is not None and ready != node.ready:
            raw["status"]["conditions"] = [_ready(ready, self.clock())]
        if cordon is not None:
            raw.setdefault("spec", {})["unschedulable"] = cordon
        self.client.put(Node.from_dict(raw))

    async def set_device(self, name: str, **spec: Any) -> None:
        d = self.client.peek(GPUDevice, name)
        if d is not None:
            self.client.put(d.model_copy(update={"spec": d.spec.model_copy(update=spec)}))

    async def agents_reset(self) -> None:
        """Each node's agent resets its devices in Cleaning and records spec.lastReset."""
        for d in self.client.objects(GPUDevice):
            if d.status.phase == Phase.CLEANING and d.spec.health == "Healthy":
                node = self.client.peek(Node, d.spec.node_name)
                if node is None or not node.ready:
                    continue
                if d.spec.last_reset is None or (
                    d.status.released_at and d.spec.last_reset < d.status.released_at
                ):
                    spec = d.spec.model_copy(update={"last_reset": self.clock()})
                    try:
                        await self.client.update(d.model_copy(update={"spec": spec}))
                    except ApiError:
                        continue

    # --- KubeVirt ---------------------------------------------------------------------

    def add_vm(
        self,
        namespace: str,
        name: str,
        gpus: dict[str, int],
        running: bool = False,
        annotations: dict[str, str] | None = None,
    ) -> None:
        entries = []
        i = 0
        for cls_name, count in gpus.items():
            c = next(c for c in self.classes if c.name == cls_name)
            for _ in range(count):
                entries.append({"name": f"gpu{i}", "deviceName": c.resource})
                i += 1
        self.client.put(
            VirtualMachine.from_dict(
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "annotations": annotations or {},
                    },
                    "spec": {
                        "running": running,
                        "template": {"spec": {"domain": {"devices": {"gpus": entries}}}},
                    },
                }
            )
        )

    async def set_running(self, key: str, running: bool) -> None:
        vm = self.client.peek(VirtualMachine, *_name_ns(key))
        if vm is None:
            return
        raw = vm.to_dict()
        raw["spec"]["running"] = running
        self.client.put(VirtualMachine.from_dict(raw))
        await self.kubevirt()

    async def annotate_vm(self, key: str, annotations: dict[str, str]) -> None:
        vm = self.client.peek(VirtualMachine, *_name_ns(key))
        if vm is not None:
            meta = vm.metadata.model_copy(
                update={"annotations": {**vm.metadata.annotations, **annotations}}
            )
            self.client.put(VirtualMachine.from_dict({**vm.to_dict(), "metadata": meta.to_dict()}))

    async def delete_vm(self, key: str) -> None:
        name, ns = _name_ns(key)
        vmi = self.client.peek(VirtualMachineInstance, name, ns)
        if vmi is not None and vmi.live:
            await self._end_vmi(vmi, "Succeeded")
        with contextlib.suppress(NotFound):
            await self.client.delete(VirtualMachine, name, ns)

    async def kubevirt(self) -> None:
        """The VM controller: start VMIs of running VMs, stop those of stopped ones."""
        for vm in list(self.client.objects(VirtualMachine)):
            vmi = self.client.peek(VirtualMachineInstance, vm.metadata.name, vm.metadata.namespace)
            if vm.running and (vmi is None or not vmi.live):
                if self.retry_at.get(vm.key, self.clock()) > self.clock():
                    continue
                if vmi is not None:
                    await self._delete_vmi(vmi)
                await self.start_vmi(vm)
            elif not vm.running and vmi is not None:
                if vmi.live:
                    await self._end_vmi(vmi, "Succeeded")
                await self._delete_vmi(vmi)
        await self.settle()

    async def start_vmi(self, vm: VirtualMachine | None, raw: dict[str, Any] | None = None) -> bool:
        """Create a VMI through the webhook's decision; a denial leaves it for a retry."""
        if raw is None:
            assert vm is not None
            raw = {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "metadata": {
                    "name": vm.metadata.name,
                    "namespace": vm.metadata.namespace,
                    "uid": str(uuid.UUID(int=next(self._names) + (1 << 64))),
                    "ownerReferences": [
                        {
                            "apiVersion": "kubevirt.io/v1",
                            "kind": "VirtualMachine",
                            "name": vm.metadata.name,
                            "uid": vm.metadata.uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": json.loads(json.dumps(vm.raw["spec"]["template"]["spec"])),
                "status": {"phase": "Pending"},
            }
        key = f"{raw['metadata']['namespace']}/{raw['metadata']['name']}"
        response = (await self.admit(raw)).get("response") or {}
        if not response.get("allowed"):
            self.retry_at[key] = self.clock() + timedelta(seconds=10)
            self.stats.starts_denied += 1
            msg = response.get("status", {}).get("message", "denied")
            self.log.add(self.clock(), "webhook", f"denied {key}: {msg}")
            return False
        if response.get("patch"):
            raw = apply_patch(raw, json.loads(base64.b64decode(response["patch"])))
        node = self.schedule(raw)
        if node is None:
            self.log.add(self.clock(), "scheduler", f"{key}: no node satisfies its affinity")
            return False
        raw["status"] = {"phase": "Scheduled", "nodeName": node}
        self.client.put(VirtualMachineInstance.from_dict(raw))
        self.log.add(self.clock(), "kubevirt", f"VMI {key} admitted, scheduled on {node}")
        await self.settle()
        return True

    async def admit(self, vmi_raw: dict[str, Any]) -> dict[str, Any]:
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(next(self._names)),
                "operation": "CREATE",
                "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
                "namespace": vmi_raw["metadata"]["namespace"],
                "object": vmi_raw,
                "dryRun": False,
            },
        }
        decision = self.admitter.decide(review)
        if not isinstance(decision, NeedsRequest):
            return decision.response
        created = await self.client.create(decision.request)
        await self.settle()
        answered = (
            self.client.peek(GPUBindRequest, created.metadata.name, created.metadata.namespace)
            or created
        )
        response = self.admitter.answer(review, answered)
        if answered.status.phase == "Bound":
            self.stats.requests_answered += 1
        elif answered.status.phase == "Failed":
            self.stats.requests_failed += 1
        with contextlib.suppress(NotFound):
            await self.client.delete(
                GPUBindRequest, created.metadata.name, created.metadata.namespace
            )
        return response

    def schedule(self, raw: dict[str, Any]) -> str | None:
        """The scheduler: the first Ready, uncordoned node the required affinity allows."""
        terms = (
            (((raw.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms")
        )
        for node in sorted(self.client.objects(Node), key=lambda n: n.name):
            if not node.ready or node.unschedulable:
                continue
            if not terms or any(_term_matches(t, node) for t in terms):
                return node.name
        return None

    async def kubelet(self) -> None:
        """Start scheduled VMIs whose slot resources are free on their node; fail the rest."""
        used: dict[str, set[str]] = {}
        vmis = self.client.objects(VirtualMachineInstance)
        for v in vmis:
            if v.phase == "Running" and v.live:
                used.setdefault(v.node_name, set()).update(_slots(v.raw))
        for v in vmis:
            if v.phase != "Scheduled" or not v.live:
                continue
            node = self.client.peek(Node, v.node_name)
            wanted = _slots(v.raw)
            taken = used.setdefault(v.node_name, set())
            missing = [
                s for s in wanted if node is None or node.allocatable.get(s, 0) < 1 or s in taken
            ]
            raw = v.to_dict()
            if missing or node is None or not node.ready:
                raw["status"]["phase"] = "Failed"
                raw["status"]["reason"] = f"slot resources not free: {', '.join(missing)}"
                raw["status"]["phaseTransitionTimestamps"] = [
                    {"phase": "Failed", "phaseTransitionTimestamp": _iso(self.clock())}
                ]
                self.stats.starts_failed += 1
                self.log.add(
                    self.clock(), "kubelet", f"{v.key} failed to start: {raw['status']['reason']}"
                )
            else:
                raw["status"]["phase"] = "Running"
                taken.update(wanted)
                self.log.add(self.clock(), "kubelet", f"{v.key} running on {v.node_name}")
            self.client.put(VirtualMachineInstance.from_dict(raw))
        await self.settle()

    async def _end_vmi(self, vmi: VirtualMachineInstance, phase: str) -> None:
        raw = vmi.to_dict()
        raw.setdefault("status", {})["phase"] = phase
        raw["status"]["phaseTransitionTimestamps"] = [
            {"phase": phase, "phaseTransitionTimestamp": _iso(self.clock())}
        ]
        self.client.put(VirtualMachineInstance.from_dict(raw))
        self.log.add(self.clock(), "kubevirt", f"VMI {vmi.key} {phase.lower()}")

    async def _delete_vmi(self, vmi: VirtualMachineInstance) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(
                VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace
            )

    def notes(self) -> list[Note]:
        recorder = self.recorder
        return list(recorder.recorded)


def _slots(raw: dict[str, Any]) -> list[str]:
    devices = ((raw.get("spec") or {}).get("domain") or {}).get("devices") or {}
    out = []
    for section in ("gpus", "hostDevices"):
        for e in devices.get(section) or ():
            name = e.get("deviceName", "")
            if name.startswith("gpu.cozystack.io/"):
                out.append(name)
    return out


def _term_matches(term: dict[str, Any], node: Node) -> bool:
    for expr in term.get("matchFields") or ():
        if expr.get("key") == "metadata.name" and not _op(expr, node.name):
            return False
    for expr in term.get("matchExpressions") or ():
        if not _op(expr, node.metadata.labels.get(expr.get("key", ""))):
            return False
    return True


def _op(expr: dict[str, Any], value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or []
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    return False


def _ready(ready: bool, now: datetime) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "lastTransitionTime": _iso(now),
    }


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _name_ns(key: str) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return name, ns


def _kubevirt_cr(config: Config) -> Any:
    from gpu_binder.api.kinds import KubeVirt

    return KubeVirt.from_dict(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": config.kubevirt_name, "namespace": config.kubevirt_namespace},
            "spec": {"configuration": {}},
        }
    )
