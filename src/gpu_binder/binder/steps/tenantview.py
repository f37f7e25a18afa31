"""The devices annotation on a VM: which GPUs it holds, where its tenant can read them.

GPUDevices are cluster-scoped, and a tenant whose rights end at its namespace cannot list
them. So the binder keeps `gpu.cozystack.io/devices` on every VM it holds GPUs for: the
GPUDevice names of its set, comma-separated and sorted (the form the webhook gives a VMI;
a name is `<node>-<PCI address>`, so the node is in it), and takes it off when the set is
released. `kubectl get vm -o jsonpath=...` and `kubectl gpu vm` read it with the rights a
tenant has on its own VMs.

It only reports: the binder never reads it back (the set is the devices' status.binding),
and a tenant's edit of it is overwritten at the binder's next look at the VM. A VM whose
set did not change costs nothing: one merge patch per VM whose set changed, none in a
pass over an unchanged world.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import DEVICES_ANNOTATION
from gpu_binder.binder.context import Context
from gpu_binder.binder.writes import Annotations


@dataclass
class TenantViewMemory:
    # Per VM key, the VM object and its set's generation (DeviceIndex.key_gen, bumped by
    # every write of a device bound to the key) when its annotation was last found right:
    # a class change's sweep over thousands of unchanged VMs then costs two lookups per
    # VM, not a walk through every device of every set (the step's largest cost).
    shown: dict[str, tuple[VirtualMachine, int | None]] = field(default_factory=dict)


def held_by(ctx: Context, key: str, uid: str) -> str:
    """The annotation's value for the VM of key and uid: its set's devices, sorted."""
    devices = ctx.world.devices
    names = []
    for name in devices.by_vm.get(key, ()):
        b = devices.by_name[name].status.binding
        # A VM recreated under the old name is a new order: the old set is not its.
        if b is not None and (not b.vm.uid or b.vm.uid == uid):
            names.append(name)
    return ",".join(sorted(names))


def vm_annotations(ctx: Context) -> None:
    world = ctx.world
    shown = ctx.memory.of(TenantViewMemory).shown
    key_gen = world.devices.key_gen
    # No clock changes a set: only the keys an event or this pass touched, but for a first
    # pass (or a class change), which looks at every VM once.
    keys = world.vms.keys() if ctx.scope.exhaustive else ctx.scope.changed_keys(world)
    stale: list[tuple[str, VirtualMachine, str]] = []
    for key in keys:
        vm = world.vms.get(key)
        if vm is None or vm.metadata.deletion_timestamp is not None:
            continue
        seen = shown.get(key)
        if seen is not None and seen[0] is vm and seen[1] == key_gen.get(key):
            continue
        want = held_by(ctx, key, vm.metadata.uid)
        if vm.metadata.annotations.get(DEVICES_ANNOTATION, "") == want:
            shown[key] = (vm, key_gen.get(key))
            continue
        stale.append((key, vm, want))
    _prune(shown, world.vms)
    # Ordered only now, the few VMs to write: sorting every key of a sweep grew faster
    # than the keys, and the writes go in the same order as before.
    for _, vm, want in sorted(stale, key=lambda item: item[0]):
        annotations = {k: v for k, v in vm.metadata.annotations.items() if k != DEVICES_ANNOTATION}
        if want:
            annotations[DEVICES_ANNOTATION] = want
        meta = vm.metadata.model_copy(update={"annotations": annotations})
        ctx.plan.write(Annotations(replace(vm, metadata=meta)))


def _prune(shown: dict[str, tuple[VirtualMachine, int | None]], vms: Collection[str]) -> None:
    """Drop the entries of VMs that are gone once they could outnumber the live ones, so
    the memory holds at most twice what exists at amortized constant cost per pass."""
    if len(shown) > 2 * len(vms):
        for key in [k for k in shown if k not in vms]:
            del shown[key]
