"""Invariant 9 of DESIGN §2, over pods: what the kubelet handed out, against the sets.

(9) Every pod holding slot resources (a virt-launcher pod, a WaitForFirstConsumer
temporary pod) runs on its set's node and holds exactly its set's slots: judged when a
pod starts running (the kubelet has given it the devices) and again, while it runs,
whenever a device it holds or its set changes; a launcher pod no longer once its VMI is
final (the guest is off: see `_guest_ended`).

(9b) An Attached device is one its VMI runs with: a slot device held by the VMI's running
launcher pod, or for a class served by count (`pinning: Node`) one on that pod's node.
Judged while the VMI is live and has a launcher pod, when the attachment or the pod
changes. (A VMI with no pod at all — written straight into the store by a test — is not
judged: nothing ran it.)

Incremental like the rest of the checker: `check()` looks at what changed since the last.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.api.slots import format_slot, is_slot
from gpu_binder.api.types import GPUClass, GPUDevice
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.launcher import is_temp_pod
from gpu_binder.sim.memory import MemoryClient


def _slot(d: GPUDevice) -> str:
    return format_slot(d.spec.vendor_id, d.spec.device_id, d.spec.slot or 0)


class PodChecker:
    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self._devices: dict[str, GPUDevice] = {}
        self._classes: dict[str, GPUClass] = {}
        self._slots: dict[tuple[str, str], str] = {}
        # Devices bound per order (VM key), and the running pods per order.
        self._set: dict[str, set[str]] = defaultdict(set)
        self._pods_of_order: dict[str, set[str]] = defaultdict(set)
        # Running pods holding slot or class units: key -> (pod, order, slot devices held).
        self._running: dict[str, tuple[Pod, str, frozenset[str]]] = {}
        self._held_by: dict[str, set[str]] = defaultdict(set)
        # The running launcher pod of each VMI, by VMI uid.
        self._launcher: dict[str, str] = {}
        self._vmis: dict[str, VirtualMachineInstance] = {}
        self._dirty_pods: set[str] = set()
        self._dirty_devices: set[str] = set()
        for cls in client.objects(GPUClass):
            self._classes[cls.metadata.name] = cls
        for d in client.objects(GPUDevice):
            self._on_device(d, deleted=False)
        for vmi in client.objects(VirtualMachineInstance):
            self._vmis[vmi.key] = vmi
        for pod in client.objects(Pod):
            self._on_pod(pod, deleted=False)
        client.subscribe(self._on_event)

    def check(self) -> list[str]:
        out: list[str] = []
        for key in sorted(self._dirty_pods):
            found = self._running.get(key)
            if found is not None:
                out.extend(self._pod_holds_its_set(*found))
        for name in sorted(self._dirty_devices):
            d = self._devices.get(name)
            if d is not None and d.status.attachment is not None:
                out.extend(self._attached_runs_with(d))
        self._dirty_pods.clear()
        self._dirty_devices.clear()
        return out

    # --- the checks -----------------------------------------------------------------------

    def _pod_holds_its_set(self, pod: Pod, order: str, held: frozenset[str]) -> list[str]:
        """(9) The pod's slots are its set's, all of them, on the set's node."""
        if not held and not any(is_slot(r) for r in pod.resources):
            return []
        temp = is_temp_pod(pod.raw)
        if not temp and self._guest_ended(pod):
            return []
        what = "temporary pod" if temp else "pod"
        mine = {n for n in self._set.get(order, ()) if self._served_by_slot(n)}
        if not mine:
            return [
                f"(9) {what} {pod.key} holds {_names(held)} on {pod.node_name}, "
                f"but {order} has no set"
            ]
        nodes = {self._devices[n].spec.node_name for n in mine}
        if pod.node_name not in nodes:
            return [
                f"(9) {what} {pod.key} runs on {pod.node_name} holding {_names(held)}, "
                f"but the set of {order} is on {', '.join(sorted(nodes))}"
            ]
        if held != mine:
            return [
                f"(9) {what} {pod.key} of {order} holds {_names(held)}, "
                f"but its set is {_names(mine)}"
            ]
        return []

    def _attached_runs_with(self, d: GPUDevice) -> list[str]:
        """(9b) The VMI an Attached device names runs with it."""
        att = d.status.attachment
        assert att is not None
        vmi = self._vmis.get(att.vmi.key)
        if vmi is None or vmi.metadata.uid != att.vmi.uid or not vmi.live:
            return []
        pod_key = self._launcher.get(att.vmi.uid)
        if pod_key is None:
            return []
        pod, _, held = self._running[pod_key]
        if self._served_by_slot(d.metadata.name):
            if d.metadata.name in held:
                return []
        elif d.spec.node_name == pod.node_name:
            return []
        return [
            f"(9b) {d.metadata.name} is attached to VMI {att.vmi.key}, which runs on "
            f"{pod.node_name} with {_names(held)}"
        ]

    # --- following the store --------------------------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        deleted = event.type == "DELETED"
        if kind is Pod:
            self._on_pod(event.object, deleted)
        elif kind is GPUDevice:
            self._on_device(event.object, deleted)
        elif kind is VirtualMachineInstance:
            vmi: VirtualMachineInstance = event.object
            if deleted:
                self._vmis.pop(vmi.key, None)
            else:
                self._vmis[vmi.key] = vmi
        elif kind is GPUClass:
            name = event.object.metadata.name
            if deleted:
                self._classes.pop(name, None)
            else:
                self._classes[name] = event.object

    def _on_device(self, d: GPUDevice, deleted: bool) -> None:
        name = d.metadata.name
        prev = self._devices.pop(name, None)
        before = prev.status.binding.vm.key if prev is not None and prev.status.binding else ""
        if prev is not None and prev.spec.slot is not None:
            slot = (prev.spec.node_name, _slot(prev))
            if self._slots.get(slot) == name:
                del self._slots[slot]
        after = ""
        if not deleted:
            self._devices[name] = d
            if d.spec.slot is not None:
                self._slots[(d.spec.node_name, _slot(d))] = name
            after = d.status.binding.vm.key if d.status.binding else ""
            if prev is None or prev.status.attachment != d.status.attachment:
                self._dirty_devices.add(name)
        if before != after:
            for order in (before, after):
                if order:
                    self._dirty_pods |= self._pods_of_order.get(order, set())
            if before:
                self._set[before].discard(name)
            if after:
                self._set[after].add(name)
        self._dirty_pods |= self._held_by.get(name, set())

    def _on_pod(self, pod: Pod, deleted: bool) -> None:
        key = pod.key
        gone = self._running.pop(key, None)
        if gone is not None:
            _, order, held = gone
            self._pods_of_order[order].discard(key)
            for name in held:
                self._held_by[name].discard(key)
            if self._launcher.get(pod.vmi_uid) == key:
                del self._launcher[pod.vmi_uid]
        if deleted or pod.phase != "Running" or not pod.node_name or not pod.resources:
            return
        held = frozenset(
            n for r in pod.resources if (n := self._slots.get((pod.node_name, r))) is not None
        )
        order = self._order_of(pod)
        self._running[key] = (pod, order, held)
        self._pods_of_order[order].add(key)
        for name in held:
            self._held_by[name].add(key)
        if not is_temp_pod(pod.raw):
            self._launcher[pod.vmi_uid] = key
            self._dirty_devices |= {n for n in self._set.get(order, ()) if n in self._devices}
        if gone is None or gone[2] != held:
            self._dirty_pods.add(key)

    def _guest_ended(self, pod: Pod) -> bool:
        """The launcher pod's VMI is final: virt-handler reports Succeeded or Failed once
        the domain is gone (pkg/virt-handler/vm.go, calculateVmPhaseForStatusReason), so
        the pod uses no GPU, though it may read Running for long after (its node's kubelet
        down, the pod's end unreported) and the binder may have released its set."""
        vmi = self._vmis.get(f"{pod.metadata.namespace}/{pod.vmi_name}")
        return (
            vmi is not None
            and vmi.metadata.uid == pod.vmi_uid
            and vmi.phase in ("Succeeded", "Failed")
        )

    def _order_of(self, pod: Pod) -> str:
        """The order the pod's VMI runs for: its VM, or the VMI itself."""
        ns = pod.metadata.namespace
        vmi = self._vmis.get(f"{ns}/{pod.vmi_name}")
        if vmi is not None and vmi.metadata.uid == pod.vmi_uid:
            return vmi.order_key
        return f"{ns}/{pod.vmi_name}"

    def _served_by_slot(self, name: str) -> bool:
        d = self._devices.get(name)
        if d is None or d.spec.slot is None:
            return False
        cls = self._classes.get(d.status.class_name)
        return cls is not None and cls.spec.pinning == "Device"


def _names(devices: frozenset[str] | set[str]) -> str:
    return "{" + ", ".join(sorted(devices)) + "}" if devices else "no slot"
