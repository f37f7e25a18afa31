"""What GPU time the simulated cluster really used, kept by the sim itself, for the ledger
check (sim.ledgercheck, invariant 12).

Nothing here reads the binder's ledger or the times other machines stamp. An Attached
interval is a device held by a VMI: from the kubelet's admission of its first launcher
pod, when the device manager hands the pod the node's device for each slot resource it
asks (the write that makes the pod Running on its node, sim.kubelet), to the first
version of the VMI that is Succeeded or Failed, or its deletion. Not from the VMI's
Scheduled report: virt-controller writes that after the pod runs, and when time passes
between KubeVirt's steps (sim.cluster `race`) the device was the tenant's in between.

A Reserved interval is a device whose stored binding names a VM while no VMI's domain
holds it: from the write that made it so to the write that ended it (a release, a bind to
another VM, the device's deletion, a domain taking it).

Every time is the true one: the virtual clock when the store applied the write, seen
through the store's subscription hook, so on every write, not after each workload event.
That is what makes it exact. The clock moves in ticks (1 s to 400 s), and under --chaos
also between KubeVirt's steps; one event may hold several ticks (a fault: a tick, stops,
another tick). Everything in between happens at one instant. A look after each event
would stamp a change with the event's last tick, up to minutes late. A look on each write
has no such error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.api.slots import format_slot
from gpu_binder.api.types import GPUClass, GPUDevice, RecordKind
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.launcher import is_temp_pod
from gpu_binder.sim.memory import MemoryClient


@dataclass(slots=True)
class Stretch:
    """One interval of GPU time: a device held by one owner (a VMI's uid for Attached, a
    VM's namespace/name for Reserved) from start to end (None: it goes on)."""

    kind: RecordKind
    device: str
    owner: str
    namespace: str
    class_name: str
    start: datetime
    end: datetime | None = None

    def seconds(self, now: datetime) -> float:
        return max(0.0, ((self.end or now) - self.start).total_seconds())


@dataclass(slots=True)
class _Domain:
    node: str
    devices: frozenset[str]
    namespace: str


class GroundTruth:
    """Follows the store from its construction on and keeps every interval of GPU time."""

    def __init__(
        self,
        client: MemoryClient,
        clock: Callable[[], datetime],
    ) -> None:
        self.clock = clock
        self.client = client
        self.stretches: list[Stretch] = []
        self._devices: dict[str, GPUDevice] = {}
        self._slots: dict[tuple[str, str], str] = {}
        # The VMIs whose domain holds devices, by uid, and the holders of each device.
        self._domains: dict[str, _Domain] = {}
        self._held_by: dict[str, set[str]] = {}
        self._attached: dict[tuple[str, str], Stretch] = {}
        self._reserved: dict[str, Stretch] = {}
        self._classes: dict[tuple[str, str], str] = {}
        # The live VMIs, by uid: a pod admitted for one that is final or gone holds nothing.
        self._live: set[str] = set()
        for d in client.objects(GPUDevice):
            self._on_device(d, deleted=False)
        for vmi in client.objects(VirtualMachineInstance):
            self._on_vmi(vmi, deleted=False)
        for pod in client.objects(Pod):
            self._on_pod(pod)
        client.subscribe(self._on_event)

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is GPUDevice:
            self._on_device(event.object, event.type == "DELETED")
        elif kind is VirtualMachineInstance:
            self._on_vmi(event.object, event.type == "DELETED")
        elif kind is Pod and event.type != "DELETED":
            self._on_pod(event.object)

    # --- devices and their bindings ---------------------------------------------------------

    def _on_device(self, d: GPUDevice, deleted: bool) -> None:
        name = d.name
        prev = self._devices.pop(name, None)
        if prev is not None and prev.spec.slot is not None:
            self._slots.pop((prev.spec.node_name, _slot(prev)), None)
        if not deleted:
            self._devices[name] = d
            if d.spec.slot is not None:
                self._slots[(d.spec.node_name, _slot(d))] = name
        self._judge_reserved(name)

    def _judge_reserved(self, name: str) -> None:
        """Open, go on with, or end the device's Reserved interval as it stands now."""
        d = self._devices.get(name)
        b = d.status.binding if d is not None else None
        owner = b.vm.key if b is not None else None
        if self._held_by.get(name):
            owner = None
        open_ = self._reserved.get(name)
        if open_ is not None and open_.owner == owner:
            return
        now = self.clock()
        if open_ is not None:
            open_.end = now
            del self._reserved[name]
        if owner is not None and d is not None and b is not None:
            s = Stretch(
                RecordKind.RESERVED,
                name,
                owner,
                b.vm.namespace,
                self._class_of(d),
                now,
            )
            self._reserved[name] = s
            self.stretches.append(s)

    def _class_of(self, d: GPUDevice) -> str:
        """The class whose match names the device's vendor and device IDs (the sim's
        classes select on nothing else, and never change)."""
        model = (d.spec.vendor_id, d.spec.device_id)
        found = self._classes.get(model)
        if found is None:
            found = self._classes[model] = next(
                (
                    c.metadata.name
                    for c in self.client.objects(GPUClass)
                    if c.spec.match.vendor_id == model[0] and model[1] in c.spec.match.device_ids
                ),
                "",
            )
        return found

    # --- VMIs' domains ------------------------------------------------------------------------

    def _on_vmi(self, vmi: VirtualMachineInstance, deleted: bool) -> None:
        uid = vmi.metadata.uid
        if deleted or not vmi.live:
            self._live.discard(uid)
            domain = self._domains.get(uid)
            if domain is not None:
                self._end_domain(uid, domain)
        else:
            self._live.add(uid)

    def _on_pod(self, pod: Pod) -> None:
        """A launcher pod the kubelet admitted: its VMI holds what the pod was handed."""
        uid = pod.vmi_uid
        if (
            pod.phase == "Running"
            and pod.node_name
            and uid in self._live
            and uid not in self._domains
            and not is_temp_pod(pod.raw)
        ):
            self._start_domain(uid, pod)

    def _start_domain(self, uid: str, pod: Pod) -> None:
        """The devices the kubelet handed the launcher pod: each slot resource it asks for
        is its node's GPU in that slot, whoever it is bound to."""
        node = pod.node_name
        devices = frozenset(
            n for r in pod.resources if (n := self._slots.get((node, r))) is not None
        )
        namespace = pod.metadata.namespace
        self._domains[uid] = _Domain(node, devices, namespace)
        now = self.clock()
        for name in sorted(devices):
            self._held_by.setdefault(name, set()).add(uid)
            d = self._devices[name]
            s = Stretch(RecordKind.ATTACHED, name, uid, namespace, self._class_of(d), now)
            self._attached[(uid, name)] = s
            self.stretches.append(s)
            self._judge_reserved(name)

    def _end_domain(self, uid: str, domain: _Domain) -> None:
        del self._domains[uid]
        now = self.clock()
        for name in sorted(domain.devices):
            holders = self._held_by.get(name, set())
            holders.discard(uid)
            if not holders:
                self._held_by.pop(name, None)
            s = self._attached.pop((uid, name), None)
            if s is not None:
                s.end = now
            self._judge_reserved(name)


def _slot(d: GPUDevice) -> str:
    return format_slot(d.spec.vendor_id, d.spec.device_id, d.spec.slot or 0)
