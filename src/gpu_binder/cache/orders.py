"""The orders the world holds: what each VM and standalone VMI orders, who it is by uid,
which VMIs run for it, and whether it runs (a part of World, kept apart for its size).

A key ("namespace/name") names an order: a VirtualMachine, or a VMI with no VM owner.
Identity is the uid: a VM deleted and created again under its name is another order, a
VMI with no owner named like a VM runs for no order (KubeVirt's VM controller would claim
it, ClaimVirtualMachineInstanceByName in pkg/virt-controller/watch/vm/vm.go), and a set
bound under an earlier uid is not the present order's (sets releases it).

While a VMI of the order lives, what it runs with is the order (cache.vmiorder): an edit
of its VM's template takes effect at its next start, as it does in KubeVirt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_binder.api.instancetype import ControllerRevision
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance, set_to_start
from gpu_binder.api.types import Binding, GPUClass, GPUDevice
from gpu_binder.cache.deviceindex import DeviceIndex, set_node
from gpu_binder.cache.vmiorder import Resolved, resolve, revision_key, vm_entries
from gpu_binder.placement.options import resolve as resolve_alternatives

if TYPE_CHECKING:
    from collections.abc import Iterable


class Orders:
    """Queries about orders; World provides the caches they read."""

    vms: dict[str, VirtualMachine]
    vmis: dict[str, VirtualMachineInstance]
    vmis_by_order: dict[str, set[str]]
    revisions: dict[str, ControllerRevision]
    classes: dict[str, GPUClass]
    class_by_resource: dict[str, GPUClass]
    devices: DeviceIndex
    class_gen: int
    # Per VM key: the VM and revision objects its order was parsed from, and the order.
    _orders: dict[str, tuple[object, object, dict[str, int] | None]]
    # Per VMI key: what it runs with, and the objects and generations it was resolved at:
    # (VMI, its order's key generation, node, node generation, class generation, result).
    _runs: dict[str, tuple[object, int | None, str, int | None, int, Resolved]]

    # --- identity ---------------------------------------------------------------------

    def belongs(self, vmi: VirtualMachineInstance) -> bool:
        """Whether the VMI runs for the order under its order key: its VM's by uid (or a VM
        that is gone: its VMI runs on until it ends), or its own when it has no VM owner
        and no VM has its name."""
        vm = self.vms.get(vmi.order_key)
        if vmi.vm_name is None:
            return vm is None
        return vm is None or not vmi.vm_uid or vmi.vm_uid == vm.metadata.uid

    def order_uid(self, key: str) -> str:
        """The uid of the order: its VM's, else its standalone VMI's; "" when not known."""
        vm = self.vms.get(key)
        if vm is not None:
            return vm.metadata.uid
        for v in self.live_vmis(key):
            if v.vm_name is None:
                return v.metadata.uid
        return ""

    def owns(self, key: str, binding: Binding | None) -> bool:
        """Whether a device bound so is the present order's: bound under its uid, or under
        none yet (a standalone VMI's set is bound before the VMI has a uid)."""
        return _owned(self.order_uid(key), binding)

    def own_set(self, key: str) -> list[GPUDevice]:
        """The order's set without what is bound under an earlier uid of its name."""
        devs = self.devices.set_of(key)
        if not devs:
            return devs
        uid = self.order_uid(key)
        return [d for d in devs if _owned(uid, d.status.binding)]

    # --- VMIs -------------------------------------------------------------------------

    def live_vmis(self, order_key: str) -> list[VirtualMachineInstance]:
        """The order's VMIs that are not Succeeded/Failed, those being deleted included:
        they run until they end, and their devices are in use until then."""
        keys = self.vmis_by_order.get(order_key)
        if not keys:
            return []
        return [v for k in keys if (v := self.vmis[k]).live and self.belongs(v)]

    def vmi_of(self, key: str) -> VirtualMachineInstance | None:
        """The VM's VMI in any phase: the one named after it and owned by it, as KubeVirt's
        VM controller reads it."""
        vmi = self.vmis.get(key)
        if vmi is None or vmi.vm_name is None or vmi.order_key != key or not self.belongs(vmi):
            return None
        return vmi

    def vmi_node(self, vmi: VirtualMachineInstance) -> str:
        """The node whose slots the VMI's slot entries name: its set's, where the webhook
        pinned it (a status.nodeName or migration state saying otherwise moves nothing), or
        where it runs when it has no set."""
        devs = self.own_set(vmi.order_key)
        return set_node(devs) if devs else vmi.node_name

    def runs_with(self, vmi: VirtualMachineInstance) -> Resolved:
        """What the VMI runs with, read from its spec (cache.vmiorder.resolve).

        Resolved again only when the VMI, its order's set (which says its node), the
        devices of that node or the classes changed: every step asks, many times a pass."""
        devices = self.devices
        set_gen = devices.key_gen.get(vmi.order_key)
        cached = self._runs.get(vmi.key)
        if (
            cached is not None
            and cached[0] is vmi
            and cached[1] == set_gen
            and cached[3] == devices.node_gen.get(cached[2])
            and cached[4] == self.class_gen
        ):
            return cached[5]
        node = self.vmi_node(vmi)
        out = resolve(vmi.device_names, self.class_by_resource, devices.by_slot.get(node, {}))
        self._runs[vmi.key] = (vmi, set_gen, node, devices.node_gen.get(node), self.class_gen, out)
        return out

    # --- orders -----------------------------------------------------------------------

    def order_of(self, key: str) -> dict[str, int]:
        """GPUs per class the order holds to: what its live VMIs run with, else what its VM
        (or standalone VMI) orders.

        With alternatives (placement.options), the option its set holds devices of: a set
        of a100 devices serves entries naming h100 when the VM accepts both.
        """
        order = self.named_order(key)
        alternatives = self.alternatives_of(key)
        if not alternatives:
            return order
        return resolve_alternatives(order, alternatives, self._held(key))

    def named_order(self, key: str) -> dict[str, int]:
        """GPUs per class the order's entries name, before any alternative is taken."""
        live = self.live_vmis(key)
        if live:
            order: dict[str, int] = {}
            for v in live:
                for c, n in self.runs_with(v).order.items():
                    order[c] = order.get(c, 0) + n
            return order
        vm = self.vms.get(key)
        if vm is None:
            return {}
        found = self.vm_order(vm)
        # A VM whose instancetype revision is not seen yet holds what it has: KubeVirt
        # records the revision before it starts a VMI, and the set may be a request's.
        return found if found is not None else self._held(key)

    def vm_order(self, vm: VirtualMachine) -> dict[str, int] | None:
        """GPUs per class the VM's next VMI will ask for; None while its instancetype's
        revision is not known (cache.vmiorder.vm_entries)."""
        key = vm.key
        rev = self.revisions.get(revision_key(vm))
        cached = self._orders.get(key)
        if cached is not None and cached[0] is vm and cached[1] is rev:
            return cached[2]
        names = vm_entries(vm, self.revisions)
        order = None if names is None else self.class_order(names)
        self._orders[key] = (vm, rev, order)
        return order

    def class_order(self, names: Iterable[str]) -> dict[str, int]:
        """GPUs per class of entries naming a class's resourceName."""
        order: dict[str, int] = {}
        for n in names:
            cls = self.class_by_resource.get(n)
            if cls is not None:
                order[cls.metadata.name] = order.get(cls.metadata.name, 0) + 1
        return order

    def _held(self, key: str) -> dict[str, int]:
        held: dict[str, int] = {}
        for name in self.devices.by_vm.get(key, ()):
            c = self.devices.by_name[name].status.class_name
            held[c] = held.get(c, 0) + 1
        return held

    def alternatives_of(self, key: str) -> tuple[str, ...]:
        """The existing classes the order accepts in place of those its entries name."""
        vm = self.vms.get(key)
        if vm is not None:
            return self._alternatives(vm.alternatives) if vm.alternatives else ()
        for v in self.live_vmis(key):
            if v.vm_name is None and v.alternatives:
                return self._alternatives(v.alternatives)
        return ()

    def _alternatives(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(c for c in names if c in self.classes)

    def runs(self, key: str) -> bool:
        """Whether the order holds its GPUs as a running one: a VMI of it lives, or KubeVirt
        keeps its VM running (api.kubevirt.set_to_start). Else it is stopped, and its
        reservation runs."""
        if self.live_vmis(key):
            return True
        vm = self.vms.get(key)
        return vm is not None and set_to_start(vm, self.vmi_of(key))


def _owned(uid: str, binding: Binding | None) -> bool:
    if binding is None:
        return False
    return not binding.vm.uid or not uid or binding.vm.uid == uid
