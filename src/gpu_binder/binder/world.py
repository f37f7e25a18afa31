"""The binder's view of the cluster: informer caches plus indexes kept as events arrive.

Indexes are updated per event, never rebuilt per pass, so a pass costs what it reads.
The device cache is write-through: the binder's own writes enter it from the write's
response at once, so the next decision never acts on what the binder itself replaced.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from gpu_binder.api.kinds import Event, KubeVirt
from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import (
    FINALIZER,
    GROUP,
    GPUBindRequest,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
    Phase,
    RequestPhase,
)
from gpu_binder.client.interface import WatchEvent

# Deleted VMIs whose end time is kept: far more than end between two passes.
ENDED_VMIS_KEPT = 10_000


def _rv(obj: Any) -> int:
    try:
        return int(obj.metadata.resource_version)
    except (TypeError, ValueError):
        return -1


def vm_key_of_vmi(vmi: VirtualMachineInstance) -> str:
    """The order a VMI runs for: its VirtualMachine, or itself when it has none."""
    name = vmi.vm_name or vmi.metadata.name
    return f"{vmi.metadata.namespace}/{name}"


def is_free(d: GPUDevice) -> bool:
    """Free to bind: Available, schedulable, healthy and not being deleted."""
    return (
        d.status.phase == Phase.AVAILABLE
        and d.status.binding is None
        and not d.spec.unschedulable
        and d.spec.health == "Healthy"
        and d.metadata.deletion_timestamp is None
    )


class DeviceIndex:
    """GPUDevices by name with the indexes the pass reads."""

    def __init__(self) -> None:
        self.by_name: dict[str, GPUDevice] = {}
        self.by_vm: dict[str, set[str]] = defaultdict(set)
        self.by_node: dict[str, set[str]] = defaultdict(set)
        # free[class][node]: names of devices free to bind.
        self.free: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.missing_finalizer: set[str] = set()
        self.deleted: set[str] = set()
        self.lost: set[str] = set()
        self.cleaning: set[str] = set()
        self.attached: set[str] = set()
        self.unhealthy: set[str] = set()
        self.unclassified: set[str] = set()
        # Devices matching more than one class, shown on those classes' conditions.
        self.ambiguous: set[str] = set()
        # slot resource name -> devices serving it, for the KubeVirt settings.
        self.slot_users: dict[str, int] = defaultdict(int)
        # Bumped whenever a device becomes free, so a failed order is retried only then.
        self.capacity_gen = 0
        # Change counters per order key and per node: a step that found nothing to do for a
        # key skips it until something about the key changed.
        self.gen = 0
        self.key_gen: dict[str, int] = {}
        self.node_gen: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.by_name)

    def get(self, name: str) -> GPUDevice | None:
        return self.by_name.get(name)

    def put(self, d: GPUDevice) -> None:
        old = self.by_name.get(d.metadata.name)
        if old is not None:
            self._unindex(old)
        self.by_name[d.metadata.name] = d
        self._index(d)

    def remove(self, name: str) -> None:
        old = self.by_name.pop(name, None)
        if old is not None:
            self._unindex(old)

    def touch_key(self, key: str) -> None:
        self.gen += 1
        self.key_gen[key] = self.gen

    def touch_node(self, node: str) -> None:
        self.gen += 1
        self.node_gen[node] = self.gen

    def _index(self, d: GPUDevice) -> None:
        name, s = d.metadata.name, d.status
        self.by_node[d.spec.node_name].add(name)
        self.touch_node(d.spec.node_name)
        if s.binding is not None:
            self.by_vm[s.binding.vm.key].add(name)
            self.touch_key(s.binding.vm.key)
        if is_free(d):
            self.free[s.class_name][d.spec.node_name].add(name)
            self.capacity_gen += 1
        self.counts[s.class_name][s.phase or ""] += 1
        if FINALIZER not in d.metadata.finalizers:
            self.missing_finalizer.add(name)
        if d.metadata.deletion_timestamp is not None:
            self.deleted.add(name)
        if s.phase == Phase.LOST:
            self.lost.add(name)
        if s.phase == Phase.CLEANING:
            self.cleaning.add(name)
        if s.attachment is not None:
            self.attached.add(name)
        if d.spec.health != "Healthy":
            self.unhealthy.add(name)
        if s.phase is None:
            self.unclassified.add(name)
        if any(c.type == "Classified" and c.reason == "Ambiguous" for c in s.conditions):
            self.ambiguous.add(name)
        slot = slot_resource(d)
        if slot:
            self.slot_users[slot] += 1

    def _unindex(self, d: GPUDevice) -> None:
        name, s = d.metadata.name, d.status
        _discard(self.by_node, d.spec.node_name, name)
        self.touch_node(d.spec.node_name)
        if s.binding is not None:
            _discard(self.by_vm, s.binding.vm.key, name)
            self.touch_key(s.binding.vm.key)
        free = self.free.get(s.class_name)
        if free is not None:
            _discard(free, d.spec.node_name, name)
        self.counts[s.class_name][s.phase or ""] -= 1
        for idx in (
            self.missing_finalizer,
            self.deleted,
            self.lost,
            self.cleaning,
            self.attached,
            self.unhealthy,
            self.unclassified,
            self.ambiguous,
        ):
            idx.discard(name)
        slot = slot_resource(d)
        if slot:
            self.slot_users[slot] -= 1
            if self.slot_users[slot] <= 0:
                del self.slot_users[slot]

    def names_on(self, node: str) -> set[str]:
        return self.by_node.get(node, set())

    def set_of(self, vm_key: str) -> list[GPUDevice]:
        names = self.by_vm.get(vm_key)
        if not names:
            return []
        return [self.by_name[n] for n in sorted(names)]

    def free_on(self, class_name: str, node: str) -> set[str]:
        return self.free.get(class_name, {}).get(node, set())


def slot_resource(d: GPUDevice) -> str:
    """The slot resource serving this device (DESIGN "Pinning"): gpu.cozystack.io/10de-2330-s3."""
    if d.spec.slot is None:
        return ""
    return (
        f"gpu.cozystack.io/{d.spec.vendor_id.removeprefix('0x')}-"
        f"{d.spec.device_id.removeprefix('0x')}-s{d.spec.slot}"
    )


def _discard(index: dict[str, set[str]], key: str, name: str) -> None:
    names = index.get(key)
    if names is not None:
        names.discard(name)
        if not names:
            del index[key]


class World:
    """Everything the binder decides on, fed by watch events."""

    def __init__(self) -> None:
        self.devices = DeviceIndex()
        self.classes: dict[str, GPUClass] = {}
        self.class_by_resource: dict[str, GPUClass] = {}
        self.class_by_slot: dict[str, GPUClass] = {}
        self.nodes: dict[str, Node] = {}
        self.vms: dict[str, VirtualMachine] = {}
        self.vmis: dict[str, VirtualMachineInstance] = {}
        # Live VMIs by the order they run for (VM key, or the VMI's own key).
        self.vmis_by_order: dict[str, set[str]] = defaultdict(set)
        self.requests: dict[str, GPUBindRequest] = {}
        self.pending_requests: set[str] = set()
        self.records: dict[str, GPUUsageRecord] = {}
        self.open_records: set[str] = set()
        self.kubevirt: dict[str, KubeVirt] = {}
        # When deleted VMIs ended, by uid, oldest first (see vmi_ended_at).
        self.ended_vmis: dict[str, datetime] = {}
        # Devices whose class must be decided again (new, changed spec, class or node change).
        self.dirty: set[str] = set()
        self.class_gen = 0
        # Orders per VM key, parsed once per VM object and class generation.
        self._orders: dict[str, tuple[object, dict[str, int]]] = {}
        self.synced = False

    # --- feeding ----------------------------------------------------------------------

    def apply(self, event: WatchEvent[Any]) -> None:
        """Take one watch event into the caches and indexes."""
        obj = event.object
        deleted = event.type == "DELETED"
        if isinstance(obj, GPUDevice):
            self._apply_device(obj, deleted)
        elif isinstance(obj, VirtualMachineInstance):
            self._apply_vmi(obj, deleted)
        elif isinstance(obj, VirtualMachine):
            _put(self.vms, obj.key, obj, deleted)
            self.devices.capacity_gen += 1
            self.devices.touch_key(obj.key)
        elif isinstance(obj, Node):
            self._apply_node(obj, deleted)
        elif isinstance(obj, GPUClass):
            self._apply_class(obj, deleted)
        elif isinstance(obj, GPUBindRequest):
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            _put(self.requests, key, obj, deleted)
            if not deleted and obj.status.phase == RequestPhase.PENDING:
                self.pending_requests.add(key)
            else:
                self.pending_requests.discard(key)
        elif isinstance(obj, GPUUsageRecord):
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            _put(self.records, key, obj, deleted)
            if not deleted and obj.spec.end is None:
                self.open_records.add(key)
            else:
                self.open_records.discard(key)
        elif isinstance(obj, KubeVirt):
            _put(self.kubevirt, f"{obj.metadata.namespace}/{obj.metadata.name}", obj, deleted)
        elif isinstance(obj, Event):
            return

    def put_device(self, d: GPUDevice) -> None:
        """Write-through: the response of the binder's own write, or a staged decision."""
        self.devices.put(d)

    def _apply_device(self, d: GPUDevice, deleted: bool) -> None:
        name = d.metadata.name
        # A device being deleted with no finalizer left is gone from the API: this is the
        # response of the write that removed the last one, and writing it through must not
        # bring back a ghost that still holds its binding.
        if deleted or (d.metadata.deletion_timestamp is not None and not d.metadata.finalizers):
            self.devices.remove(name)
            self.dirty.discard(name)
            return
        old = self.devices.get(name)
        # Events older than what the binder already wrote through must not regress it.
        if old is not None and _rv(old) > _rv(d) >= 0:
            return
        if old is None or old.spec != d.spec:
            self.dirty.add(name)
        self.devices.put(d)

    def _apply_vmi(self, vmi: VirtualMachineInstance, deleted: bool) -> None:
        old = self.vmis.get(vmi.key)
        if old is not None:
            _discard(self.vmis_by_order, vm_key_of_vmi(old), old.key)
        _put(self.vmis, vmi.key, vmi, deleted)
        if not deleted:
            self.vmis_by_order[vm_key_of_vmi(vmi)].add(vmi.key)
        elif (end := vmi.finished_at or vmi.metadata.deletion_timestamp) is not None:
            # A VMI may end and be deleted before a pass sees it end: keep its end time, so
            # its devices' detach time and its usage records carry it, not the pass's time.
            self.ended_vmis[vmi.metadata.uid] = end
            if len(self.ended_vmis) > ENDED_VMIS_KEPT:
                del self.ended_vmis[next(iter(self.ended_vmis))]
        self.devices.touch_key(vm_key_of_vmi(vmi))

    def _apply_node(self, node: Node, deleted: bool) -> None:
        old = self.nodes.get(node.name)
        _put(self.nodes, node.name, node, deleted)
        self.devices.capacity_gen += 1
        self.devices.touch_node(node.name)
        if old is None or deleted or old.metadata.labels != node.metadata.labels:
            self.dirty.update(self.devices.names_on(node.name))

    def _apply_class(self, cls: GPUClass, deleted: bool) -> None:
        _put(self.classes, cls.metadata.name, cls, deleted)
        self.class_by_resource = {c.spec.resource_name: c for c in self.classes.values()}
        # The webhook rewrites an admitted VMI's entries to slot resources: a standalone
        # VMI, its own order, is read from those (see _order), by their vendor-device part.
        self.class_by_slot = {}
        for c in sorted(self.classes.values(), key=lambda c: c.metadata.name):
            if c.spec.pinning == "Device":
                vendor = c.spec.match.vendor_id.removeprefix("0x")
                for device_id in c.spec.match.device_ids:
                    prefix = f"{GROUP}/{vendor}-{device_id.removeprefix('0x')}"
                    self.class_by_slot.setdefault(prefix, c)
        self.devices.capacity_gen += 1
        self.class_gen += 1
        self._orders.clear()
        self.dirty.update(self.devices.by_name)

    # --- queries ----------------------------------------------------------------------

    @property
    def capacity_gen(self) -> int:
        return self.devices.capacity_gen

    def vmi_ended_at(self, key: str, uid: str) -> datetime | None:
        """When the VMI with this key and uid ended, if known: its finish time, else when its
        deletion began; remembered for a while after the VMI is gone."""
        vmi = self.vmis.get(key)
        if vmi is not None and vmi.metadata.uid == uid:
            return vmi.finished_at or vmi.metadata.deletion_timestamp
        return self.ended_vmis.get(uid)

    def live_vmis(self, order_key: str) -> list[VirtualMachineInstance]:
        keys = self.vmis_by_order.get(order_key)
        if not keys:
            return []
        return [v for k in keys if (v := self.vmis[k]).live]

    def order_of(self, key: str) -> dict[str, int]:
        """GPUs per class that the VM (or standalone VMI) with this key orders."""
        vm = self.vms.get(key)
        if vm is not None:
            cached = self._orders.get(key)
            if cached is not None and cached[0] is vm:
                return cached[1]
            order = self._order(vm.device_names)
            self._orders[key] = (vm, order)
            return order
        vmis = self.live_vmis(key)
        return self._order(vmis[0].device_names if vmis and vmis[0].vm_name is None else ())

    def _order(self, names: Iterable[str]) -> dict[str, int]:
        order: dict[str, int] = {}
        for n in names:
            cls = self.class_by_resource.get(n) or self.class_by_slot.get(n.rpartition("-s")[0])
            if cls is not None:
                order[cls.metadata.name] = order.get(cls.metadata.name, 0) + 1
        return order

    def node_usable(self, name: str) -> bool:
        """A node new sets may go to: present, Ready, not cordoned."""
        node = self.nodes.get(name)
        return node is not None and node.ready and not node.unschedulable


def _put(store: dict[str, Any], key: str, obj: Any, deleted: bool) -> None:
    if deleted:
        store.pop(key, None)
    else:
        store[key] = obj
