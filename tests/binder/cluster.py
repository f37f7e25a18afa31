"""A small cluster for binder tests: an in-memory API, a World fed from it, a binder, a clock.

The builder plays every actor but the binder: the admin (classes, cordons), the node agent
(devices, health, resets), KubeVirt (VMs, VMIs and their phases) and the kubelet's device
plugin (a node's allocatable slot resources). Tests call it, run passes, and read the
outcome from the API's objects, as a user would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_binder.api.instancetype import ControllerRevision, instancetype_revision_object
from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta, OwnerReference
from gpu_binder.api.slots import device_slot
from gpu_binder.api.types import (
    DEVICES_ANNOTATION,
    NODE_ANNOTATION,
    USAGE_FINALIZER,
    ClassCount,
    GPUBindRequest,
    GPUBindRequestSpec,
    GPUClass,
    GPUClassStatus,
    GPUDevice,
    GPUUsageRecord,
    Health,
    NameRef,
    Phase,
    RecordKind,
    VMRef,
    device_name,
)
from gpu_binder.binder.config import Config
from gpu_binder.binder.plan import Note
from gpu_binder.binder.reconciler import PASS_KEY, REQUESTS_KEY, Reconciler, Result
from gpu_binder.cache import World
from gpu_binder.cache.vmiorder import vm_entries
from gpu_binder.sim import builders
from gpu_binder.sim.binderhost import BinderHost
from gpu_binder.sim.builders import owner_reference
from gpu_binder.sim.memory import MemoryClient

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMESPACE = "tenant"
# Where the usage records live (binder.ledger).
LEDGER = Config().ledger_namespace
H100 = "h100"
H100_RESOURCE = "nvidia.com/GH100_H100_SXM5_80GB"
H100_DEVICE_ID = "0x2330"
A100 = "a100"
A100_RESOURCE = "nvidia.com/GA100_A100_80GB"
A100_DEVICE_ID = "0x20b5"


class Clock:
    """The virtual clock every actor and the binder read."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def pci(slot: int) -> str:
    return builders.pci_address(slot)


def gpu_name(node: str, slot: int) -> str:
    """The GPUDevice the builder creates for a node's slot."""
    return device_name(node, pci(slot))


@dataclass
class Cluster:
    config: Config = field(default_factory=Config)
    clock: Clock = field(default_factory=Clock)
    host: BinderHost = field(init=False)
    client: MemoryClient = field(init=False)
    binder: Reconciler = field(init=False)
    # Device ids of the classes made so far, so nodes know what their agent reports.
    device_ids: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.host = BinderHost(self.clock, self.config)
        self.client = self.host.client
        self.binder = self.host.reconciler()

    @property
    def world(self) -> World:
        return self.host.world

    def lag(self) -> None:
        """The binder's informers fall behind: events queue up until catch_up()."""
        self.host.lag()

    def catch_up(self) -> None:
        self.host.catch_up()

    # --- the admin ----------------------------------------------------------------------

    def gpu_class(
        self,
        name: str = H100,
        *,
        resource: str = H100_RESOURCE,
        device_id: str = H100_DEVICE_ID,
        policy: str = "Pack",
        topology: str = "Node",
        release_after: str | None = None,
        cleaning: str = "Reset",
        pinning: str = "Device",
        node_selector: dict[str, str] | None = None,
    ) -> GPUClass:
        self.device_ids[name] = device_id
        return self.client.put(
            builders.gpu_class(
                name,
                resource,
                device_id,
                node_selector=node_selector,
                placement={"policy": policy, "topology": topology},
                reservation={"releaseAfterStopped": release_after},
                cleaning=cleaning,
                pinning=pinning,
            )
        )

    def node(
        self,
        name: str,
        gpus: int = 8,
        *,
        class_name: str = H100,
        numa: Iterable[int] | None = None,
        nvlink: Iterable[str] | None = None,
        ready: bool = True,
        cordoned: bool = False,
        served: Iterable[int] | None = None,
        labels: dict[str, str] | None = None,
        first_slot: int = 0,
    ) -> list[str]:
        """A node with `gpus` devices of a class in slots from first_slot, all served by its
        device plugin unless `served` lists the slots it serves. Returns the device names."""
        device_id = self.device_ids.get(class_name, H100_DEVICE_ID)
        slots = list(range(first_slot, first_slot + gpus))
        numas = list(numa) if numa is not None else [s * 2 // max(gpus, 1) for s in range(gpus)]
        links = list(nvlink) if nvlink is not None else [None] * gpus
        names = []
        for i, slot in enumerate(slots):
            d = builders.gpu_device(
                name, slot, device_id, numa_node=numas[i], nvlink_domain=links[i]
            )
            self.client.put(d)
            names.append(d.metadata.name)
        existing = self.client.peek(Node, name)
        allocatable = dict(existing.allocatable) if existing is not None else {}
        served_slots = set(served) if served is not None else set(slots)
        for d_name, slot in zip(names, slots, strict=True):
            res = device_slot(self.device(d_name))
            if slot in served_slots:
                allocatable[res] = 1
            else:
                allocatable.pop(res, None)
        self._put_node(
            name, ready=ready, cordoned=cordoned, allocatable=allocatable, labels=labels or {}
        )
        return names

    def _put_node(
        self,
        name: str,
        *,
        ready: bool,
        cordoned: bool,
        allocatable: dict[str, int],
        labels: dict[str, str],
        ready_since: datetime | None = None,
    ) -> Node:
        node = builders.node_object(
            name,
            ready_since or self.clock.now,
            labels=labels,
            ready=ready,
            unschedulable=cordoned,
            allocatable=allocatable,
        )
        existing = self.client.peek(Node, name)
        if existing is not None:
            # Conditions others set (the binder's GPUDegraded) stay as they are.
            raw = node.to_dict()
            conditions = existing.raw.get("status", {}).get("conditions", [])
            others = [c for c in conditions if c.get("type") != "Ready"]
            raw["status"]["conditions"] = others + raw["status"]["conditions"]
            node = Node.from_dict(raw)
        return self.client.put(node)

    def _node_state(self, name: str) -> Node:
        node = self.client.peek(Node, name)
        assert node is not None, f"no node {name}"
        return node

    def cordon(self, name: str, cordoned: bool = True) -> None:
        n = self._node_state(name)
        self._put_node(
            name,
            ready=n.ready,
            cordoned=cordoned,
            allocatable=n.allocatable,
            labels=n.metadata.labels,
            ready_since=n.ready_since,
        )

    def set_ready(self, name: str, ready: bool) -> None:
        n = self._node_state(name)
        self._put_node(
            name,
            ready=ready,
            cordoned=n.unschedulable,
            allocatable=n.allocatable,
            labels=n.metadata.labels,
        )

    def serve(self, name: str, slots: Iterable[int]) -> None:
        """The node's device plugin now serves exactly these slots of its devices."""
        n = self._node_state(name)
        keep = set(slots)
        allocatable = {k: v for k, v in n.allocatable.items() if not k.startswith("gpu.")}
        for d_name in self.world.devices.names_on(name):
            d = self.device(d_name)
            if d.spec.slot in keep:
                allocatable[device_slot(d)] = 1
        self._put_node(
            name,
            ready=n.ready,
            cordoned=n.unschedulable,
            allocatable=allocatable,
            labels=n.metadata.labels,
            ready_since=n.ready_since,
        )

    async def remove_node(self, name: str) -> None:
        await self.client.delete(Node, name)

    # --- the node agent and the admin on devices ------------------------------------------

    def device(self, name: str) -> GPUDevice:
        d = self.client.peek(GPUDevice, name)
        assert d is not None, f"no device {name}"
        return d

    def _device_spec(self, name: str, **update: Any) -> None:
        d = self.device(name)
        self.client.put(d.model_copy(update={"spec": d.spec.model_copy(update=update)}))

    def set_health(self, name: str, healthy: bool, message: str = "") -> None:
        health = Health.HEALTHY if healthy else Health.UNHEALTHY
        self._device_spec(name, health=health, health_message=message)

    def set_unschedulable(self, name: str, unschedulable: bool = True) -> None:
        self._device_spec(name, unschedulable=unschedulable)

    def reset(self, name: str, at: datetime | None = None) -> None:
        """The agent's function-level reset of a device, recorded in spec.lastReset."""
        self._device_spec(name, last_reset=at or self.clock.now)

    async def delete_device(self, name: str) -> None:
        await self.client.delete(GPUDevice, name)

    # --- KubeVirt ----------------------------------------------------------------------

    def vm(
        self,
        name: str,
        gpus: int = 1,
        *,
        running: bool = False,
        resource: str = H100_RESOURCE,
        extra: dict[str, int] | None = None,
        annotations: dict[str, str] | None = None,
        created: datetime | None = None,
        run_strategy: str | None = None,
        instancetype: dict[str, Any] | None = None,
    ) -> VirtualMachine:
        """A VM ordering `gpus` of a class's resource (plus `extra`: resource → count); with
        `run_strategy`, spec.runStrategy instead of the deprecated spec.running; with
        `instancetype`, its spec.instancetype matcher. Its status is kept as it was."""
        entries = [{"name": f"gpu{i}", "deviceName": resource} for i in range(gpus)]
        host = [
            {"name": f"host-{res}-{i}", "deviceName": res}
            for res, n in (extra or {}).items()
            for i in range(n)
        ]
        existing = self.client.peek(VirtualMachine, name, NAMESPACE)
        meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
        if existing is not None:
            meta = existing.metadata.to_dict()
        if annotations is not None:
            # As `kubectl apply` edits them: the annotation the binder keeps stays.
            kept = {k: v for k, v in meta.get("annotations", {}).items() if k == DEVICES_ANNOTATION}
            meta["annotations"] = {**kept, **annotations}
        if created is not None:
            meta["creationTimestamp"] = created.isoformat()
        spec: dict[str, Any] = {
            "template": {"spec": {"domain": {"devices": {"gpus": entries, "hostDevices": host}}}}
        }
        if run_strategy is not None:
            spec["runStrategy"] = run_strategy
        else:
            spec["running"] = running
        if instancetype is not None:
            spec["instancetype"] = instancetype
        raw: dict[str, Any] = {"metadata": meta, "spec": spec}
        if existing is not None and existing.raw.get("status"):
            raw["status"] = existing.raw["status"]
        return self.client.put(VirtualMachine.from_dict(raw))

    def instancetype_vm(
        self,
        name: str,
        instancetype: str,
        gpus: int = 0,
        *,
        kind: str = "VirtualMachineInstancetype",
        resource: str = H100_RESOURCE,
        running: bool = True,
        recorded: bool = True,
    ) -> ControllerRevision:
        """A VM whose GPUs come from its instancetype: KubeVirt recorded the instancetype
        (`gpus` entries of `resource`) in a revision and, when `recorded`, pointed the VM's
        status at it (pkg/instancetype/revision/store.go). Returns the revision."""
        rev_name = f"{name}-{instancetype}-v1beta1-uid-1"
        vm = self.vm(name, 0, running=running, instancetype={"name": instancetype, "kind": kind})
        rev = self.client.put(
            ControllerRevision.from_dict(
                instancetype_revision_object(
                    rev_name,
                    NAMESPACE,
                    instancetype=instancetype,
                    kind=kind,
                    gpus=[resource] * gpus,
                    owner=owner_reference(vm),
                )
            )
        )
        if recorded:
            self.record_revision(name, rev_name, instancetype, kind)
        return rev

    def record_revision(
        self, name: str, revision: str, instancetype: str, kind: str = "VirtualMachineInstancetype"
    ) -> VirtualMachine:
        ref = {"name": instancetype, "kind": kind, "controllerRevisionRef": {"name": revision}}
        return self.vm_status(name, instancetypeRef=ref)

    def vm_status(self, name: str, **status: Any) -> VirtualMachine:
        """KubeVirt's VM controller (or virt-api) writes these fields of the VM's status:
        runStrategy, stateChangeRequests, instancetypeRef..."""
        raw = self._vm(name).to_dict()
        raw["status"] = {**(raw.get("status") or {}), **status}
        return self.client.put(VirtualMachine.from_dict(raw))

    def _vm(self, name: str) -> VirtualMachine:
        vm = self.client.peek(VirtualMachine, name, NAMESPACE)
        assert vm is not None, f"no VM {name}"
        return vm

    def vm_uid(self, name: str) -> str:
        return self._vm(name).metadata.uid

    def set_running(self, name: str, running: bool) -> None:
        raw = self._vm(name).to_dict()
        raw["spec"]["running"] = running
        self.client.put(VirtualMachine.from_dict(raw))

    def annotate_vm(self, name: str, node: str | None) -> None:
        raw = self._vm(name).to_dict()
        annotations = dict(raw["metadata"].get("annotations") or {})
        if node is None:
            annotations.pop(NODE_ANNOTATION, None)
        else:
            annotations[NODE_ANNOTATION] = node
        raw["metadata"]["annotations"] = annotations
        self.client.put(VirtualMachine.from_dict(raw))

    async def delete_vm(self, name: str) -> None:
        await self.client.delete(VirtualMachine, name, NAMESPACE)

    def start(
        self,
        name: str,
        *,
        node: str | None = None,
        devices: Iterable[str] | None = None,
        phase: str = "Running",
        owned: bool = True,
        resource: str = H100_RESOURCE,
        gpus: int | None = None,
        scheduled: datetime | None = None,
        finalizers: Iterable[str] | None = None,
    ) -> VirtualMachineInstance:
        """A VMI of the VM as KubeVirt runs it after the webhook admitted it: on its set's
        node, annotated with its set, holding the webhook's usage finalizer.
        `devices`/`node` override what the webhook said; devices=() leaves the annotation
        and the finalizer out (a VMI the webhook never saw); `scheduled` is when KubeVirt
        recorded it Scheduled; `finalizers` replaces the webhook's."""
        vm = self.client.peek(VirtualMachine, name, NAMESPACE) if owned else None
        if devices is None:
            names = sorted(self.world.devices.by_vm.get(f"{NAMESPACE}/{name}", set()))
        else:
            names = list(devices)
        if node is None:
            assert names, f"VM {name} has no set to start on; say which node"
            node = self.device(names[0]).spec.node_name
        meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
        if names:
            meta["annotations"] = {DEVICES_ANNOTATION: ",".join(names)}
        if finalizers is None:
            finalizers = [USAGE_FINALIZER] if names else []
        if finalizers:
            meta["finalizers"] = list(finalizers)
        if vm is not None:
            meta["ownerReferences"] = [
                OwnerReference(
                    api_version="kubevirt.io/v1",
                    kind="VirtualMachine",
                    name=name,
                    uid=vm.metadata.uid,
                    controller=True,
                ).to_dict()
            ]
            template = vm.raw["spec"]["template"]["spec"]
            if vm.instancetype:
                # KubeVirt applies the recorded instancetype to the VMI it creates.
                applied = vm_entries(vm, self.world.revisions) or ()
                gpus = [{"name": f"gpu{i}", "deviceName": n} for i, n in enumerate(applied)]
                template = {**template, "domain": {"devices": {"gpus": gpus}}}
        else:
            count = gpus if gpus is not None else 1
            template = {
                "domain": {
                    "devices": {
                        "gpus": [{"name": f"gpu{i}", "deviceName": resource} for i in range(count)]
                    }
                }
            }
        if names:
            # As the webhook rewrote them: one slot resource per admitted device.
            slots = [
                {"name": f"gpu{i}", "deviceName": device_slot(self.device(n))}
                for i, n in enumerate(names)
            ]
            template = {**template, "domain": {"devices": {"gpus": slots}}}
        raw = {
            "metadata": meta,
            "spec": template,
            "status": {"phase": phase, "nodeName": node},
        }
        if scheduled is not None:
            stamp = {"phase": "Scheduled", "phaseTransitionTimestamp": scheduled.isoformat()}
            raw["status"]["phaseTransitionTimestamps"] = [stamp]
        return self.client.put(VirtualMachineInstance.from_dict(raw))

    def vmi(self, name: str) -> VirtualMachineInstance:
        vmi = self.client.peek(VirtualMachineInstance, name, NAMESPACE)
        assert vmi is not None, f"no VMI {name}"
        return vmi

    def finish(self, name: str, phase: str = "Succeeded", at: datetime | None = None) -> None:
        """The VMI ends (the guest shut down or failed); KubeVirt records when."""
        raw = self.vmi(name).to_dict()
        when = (at or self.clock.now).isoformat()
        raw["status"] = {
            **raw.get("status", {}),
            "phase": phase,
            "phaseTransitionTimestamps": [{"phase": phase, "phaseTransitionTimestamp": when}],
        }
        self.client.put(VirtualMachineInstance.from_dict(raw))

    async def remove_vmi(self, name: str) -> None:
        await self.client.delete(VirtualMachineInstance, name, NAMESPACE)

    async def stop(self, name: str) -> None:
        """Stop a running VM as KubeVirt does: the VMI ends, then goes away."""
        self.set_running(name, False)
        self.finish(name)
        await self.remove_vmi(name)

    # --- the webhook -------------------------------------------------------------------

    def request(
        self, vm: str, count: int, class_name: str = H100, *, name: str | None = None
    ) -> GPUBindRequest:
        vm_obj = self.client.peek(VirtualMachine, vm, NAMESPACE)
        req = GPUBindRequest(
            metadata=ObjectMeta(name=name or f"{vm}-bind", namespace=NAMESPACE),
            spec=GPUBindRequestSpec(
                vm=VMRef(name=vm, uid=vm_obj.metadata.uid if vm_obj else ""),
                vmi=NameRef(name=vm),
                requests=(ClassCount(class_name=class_name, count=count),),
            ),
        )
        return self.client.put(req)

    def answer(self, name: str) -> GPUBindRequest:
        req = self.client.peek(GPUBindRequest, name, NAMESPACE)
        assert req is not None
        return req

    # --- the binder --------------------------------------------------------------------

    async def run(self, key: str = PASS_KEY) -> Result:
        return await self.binder.reconcile(key)

    async def answer_requests(self) -> Result:
        return await self.binder.reconcile(REQUESTS_KEY)

    async def settle(self, limit: int = 20) -> int:
        """Passes until one writes nothing; returns the writes made. Fails if it never ends."""
        total = 0
        for _ in range(limit):
            result = await self.run()
            total += result.writes
            if result.writes == 0 and not result.aborted:
                return total
        raise AssertionError(f"the binder did not settle in {limit} passes")

    async def settle_after(self, **delta: float) -> int:
        """Let time pass, then settle: a resync noticing a grace period expire."""
        self.clock.advance(**delta)
        return await self.settle()

    def restart(self, config: Config | None = None) -> None:
        """A new binder process: a fresh World listed from the API, empty memory."""
        self.config = config or self.config
        self.host.restart(self.config)
        self.binder = self.host.reconciler()

    # --- reading the outcome -----------------------------------------------------------

    def phase(self, device: str) -> Phase | None:
        return self.device(device).status.phase

    def bound_to(self, device: str) -> str | None:
        b = self.device(device).status.binding
        return b.vm.name if b is not None else None

    def set_of(self, vm: str) -> list[str]:
        """The devices bound to the VM, by name, as the API holds them."""
        return sorted(
            d.metadata.name
            for d in self.client.objects(GPUDevice)
            if d.status.binding is not None and d.status.binding.vm.key == f"{NAMESPACE}/{vm}"
        )

    def node_of(self, vm: str) -> str:
        nodes = {self.device(n).spec.node_name for n in self.set_of(vm)}
        assert len(nodes) == 1, f"VM {vm} has a set on nodes {sorted(nodes)}"
        return nodes.pop()

    def free_on(self, node: str) -> list[str]:
        return sorted(
            d.metadata.name
            for d in self.client.objects(GPUDevice)
            if d.spec.node_name == node and d.status.phase == Phase.AVAILABLE
        )

    def gpu_class_status(self, name: str = H100) -> GPUClassStatus:
        cls = self.client.peek(GPUClass, name)
        assert cls is not None
        return cls.status

    def ledger(self) -> list[GPUUsageRecord]:
        """Every record of the ledger (in its namespace; the tenants' copies left out)."""
        book = self.config.ledger_namespace
        return sorted(
            (r for r in self.client.objects(GPUUsageRecord) if r.metadata.namespace == book),
            key=lambda r: r.metadata.name,
        )

    def records(self) -> list[GPUUsageRecord]:
        """The ledger's Attached records: GPU use by VMIs."""
        return [r for r in self.ledger() if r.spec.kind == RecordKind.ATTACHED]

    def reserved(self) -> list[GPUUsageRecord]:
        """The ledger's Reserved records: GPUs bound with no VMI on them."""
        return [r for r in self.ledger() if r.spec.kind == RecordKind.RESERVED]

    def copies(self, namespace: str = NAMESPACE) -> list[GPUUsageRecord]:
        """The tenant's copies of its records, in its namespace."""
        return sorted(
            (r for r in self.client.objects(GPUUsageRecord) if r.metadata.namespace == namespace),
            key=lambda r: r.metadata.name,
        )

    @property
    def events(self) -> list[Note]:
        recorded: list[Note] = getattr(self.binder.recorder, "recorded", [])
        return recorded

    def events_of(self, name: str, reason: str | None = None) -> list[Note]:
        return [e for e in self.events if e.name == name and (reason is None or e.reason == reason)]

    def violations(self) -> list[str]:
        return check_invariants(self.client)


def check_invariants(client: MemoryClient) -> list[str]:
    """DESIGN §2 invariants 1 and 2 and the free-count bookkeeping, over the API's objects."""
    out: list[str] = []
    devices = client.objects(GPUDevice)
    vmis = {
        (v.metadata.namespace, v.metadata.name): v for v in client.objects(VirtualMachineInstance)
    }
    # By the VM's uid: a VM deleted and created again under its name is another VM, and
    # the old one's set stays with its still-running VMI (invariant 3) on its own node.
    nodes_of: dict[tuple[str, str], set[str]] = {}
    for d in devices:
        s = d.status
        if s.binding is not None:
            vm = s.binding.vm
            nodes_of.setdefault((vm.key, vm.uid), set()).add(d.spec.node_name)
            if s.phase in (Phase.AVAILABLE, Phase.CLEANING):
                out.append(f"{d.metadata.name} is {s.phase} yet bound to {s.binding.vm.key}")
        elif s.phase in (Phase.BOUND, Phase.ATTACHED):
            out.append(f"{d.metadata.name} is {s.phase} with no binding")
        if s.attachment is not None:
            vmi = vmis.get((s.attachment.vmi.namespace, s.attachment.vmi.name))
            if s.binding is None:
                out.append(f"{d.metadata.name} is attached with no binding")
            elif (
                vmi is not None
                and vmi.vm_name is not None
                and (
                    vmi.vm_name != s.binding.vm.name
                    or vmi.metadata.namespace != s.binding.vm.namespace
                )
            ):
                out.append(
                    f"{d.metadata.name} is attached to {s.attachment.vmi.key} "
                    f"but bound to {s.binding.vm.key}"
                )
    for (key, uid), nodes in nodes_of.items():
        if len(nodes) > 1:
            out.append(f"{key} (uid {uid}) has a set on nodes {sorted(nodes)}")
    return out
