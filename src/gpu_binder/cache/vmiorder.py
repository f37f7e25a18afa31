"""What a VM orders and what a VMI runs with: one rule, for the webhook and the binder.

A VM's order is the GPU entries KubeVirt gives the VMIs it starts for it: the template's
`gpus[]` and `hostDevices[]`, and for a section the template leaves empty, its
instancetype's, read from the ControllerRevision KubeVirt recorded for the VM, never
from the live instancetype (`vm_entries`; see api.instancetype for KubeVirt's files).

A VMI's order is its own spec: KubeVirt applied the instancetype into it before it was
created, the webhook rewrote it at admission, and from then on nobody else may change it
(virt-api's vmi-update-admitter refuses spec changes from any account but KubeVirt's own,
`pkg/virt-api/webhooks/validating-webhook/admitters/vmi-update-admitter.go`). Nothing
else a tenant can write — the `gpu.cozystack.io/devices` annotation, the status — says
what it runs with. Its entries resolve one by one (`resolve`):
- an entry naming a class's resourceName is one GPU of that class (of the older class
  when two name one resourceName, world.class_by_resource);
- an entry naming a slot resource is the device serving that slot on the VMI's node,
  and a GPU of that device's class: slot names repeat on every node, and one
  vendor:device may belong to several classes (split by nodeSelector, or one with
  `deviceIDs: []` matching the vendor's every device), so only the device at (node, slot)
  says which GPU and which class it is;
- any other entry is not the binder's.

The webhook resolves a starting VMI's entries against its set (the devices of one node),
the binder a running VMI's against the node of its set, or of the VMI when it has none:
the same function, so both agree on what a VMI asks for and runs with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpu_binder.api.instancetype import ControllerRevision
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.slots import device_slot, is_slot
from gpu_binder.api.types import GPUClass, GPUDevice


@dataclass(frozen=True, slots=True)
class Resolved:
    """A VMI's GPU entries, resolved."""

    # GPUs per class: its class entries, and the class of each device its slots name.
    order: dict[str, int]
    # The devices its slot entries name, in entry order (Device classes).
    devices: tuple[str, ...]
    # Slot resources it names that no device of the node (or set) serves.
    unresolved: tuple[str, ...]
    # GPUs per class its entries name by resourceName (served by count, not by slot).
    by_count: dict[str, int]


def resolve(
    names: Iterable[str],
    classes: Mapping[str, GPUClass],
    slots: Mapping[str, GPUDevice],
) -> Resolved:
    """Resolve device names: `classes` by resourceName, `slots` the devices of one node
    (or one set) by the slot resource serving each (see the module docstring)."""
    order: dict[str, int] = {}
    by_count: dict[str, int] = {}
    devices: list[str] = []
    unresolved: list[str] = []
    taken: set[str] = set()
    for name in names:
        cls = classes.get(name)
        if cls is not None:
            c = cls.metadata.name
            order[c] = order.get(c, 0) + 1
            by_count[c] = by_count.get(c, 0) + 1
            continue
        if not is_slot(name):
            continue
        d = slots.get(name)
        # A slot named twice is one device: the second entry has none to get.
        if d is None or d.metadata.name in taken or not d.status.class_name:
            unresolved.append(name)
            continue
        taken.add(d.metadata.name)
        devices.append(d.metadata.name)
        order[d.status.class_name] = order.get(d.status.class_name, 0) + 1
    return Resolved(order, tuple(devices), tuple(unresolved), by_count)


def slots_of(devices: Iterable[GPUDevice]) -> dict[str, GPUDevice]:
    """The devices of a set (all on one node) by the slot resource serving each."""
    return {slot: d for d in devices if (slot := device_slot(d))}


def vm_entries(
    vm: VirtualMachine, revisions: Mapping[str, ControllerRevision]
) -> tuple[str, ...] | None:
    """The device names the VM's next VMI gets: the template's per section, else those of
    the instancetype revision KubeVirt recorded. None while a VM with an instancetype has
    no revision the binder has seen (KubeVirt records it before it starts a VMI)."""
    if not vm.instancetype:
        return vm.device_names
    rev = recorded_revision(vm, revisions)
    if rev is None:
        return None
    gpus = vm.template_gpus or rev.gpus
    host = vm.template_host_devices or rev.host_devices
    return gpus + host


def revision_key(vm: VirtualMachine) -> str:
    """The key of the revision the VM's instancetype is read from, "" when it names none:
    spec.instancetype.revisionName, else the one its status records
    (pkg/instancetype/find/revision.go, revisionFinder.Find)."""
    name = vm.instancetype_revision or vm.recorded_revision
    return f"{vm.metadata.namespace}/{name}" if vm.instancetype and name else ""


def recorded_revision(
    vm: VirtualMachine, revisions: Mapping[str, ControllerRevision]
) -> ControllerRevision | None:
    rev = revisions.get(revision_key(vm))
    if rev is None:
        return None
    if not vm.instancetype_revision and rev.object_name != vm.instancetype:
        # A status ref counts only for the instancetype it recorded (revisionFinder.Find):
        # the VM names another now, whose revision KubeVirt has yet to store.
        return None
    return rev
