"""The VM controller's instancetype handling (kubevirt/kubevirt `pkg/instancetype`).

- `sync_reference` is `controller/vm/controller.go` `Sync` under the default reference
  policy: the instancetype a VM names must exist unless a revision of it is recorded
  (`checkResourcesExist`); a copy of it is stored once in a ControllerRevision owned by
  the VM, named `<vm>-<instancetype>-<version>-<uid>-<generation>` and labelled with the
  object it copies (`revision/store.go`, `storeInstancetypeRevision`,
  `CreateControllerRevision`), and `status.instancetypeRef` names it (`revision/patch.go`).
  A matcher naming another instancetype (or kind) clears the reference; a
  `revisionName` in the matcher is taken as the reference (`syncStatusWithMatcher`).
- `instancetype_spec` reads the spec the way `find/spec.go` `specFinder.Find` does: from
  the recorded revision when there is one, else from the live object.
- `apply_devices` is `apply/gpu.go` and `apply/hostdevices.go`: the instancetype's
  `gpus` / `hostDevices` are copied into the VMI spec; a spec naming its own besides is a
  conflict.
"""

from __future__ import annotations

from typing import Any

from gpu_binder.api.instancetype import (
    INSTANCETYPE_API_VERSION,
    OBJECT_GENERATION_LABEL,
    OBJECT_KIND_LABEL,
    OBJECT_NAME_LABEL,
    OBJECT_UID_LABEL,
    OBJECT_VERSION_LABEL,
    REVISION_API_VERSION,
    ControllerRevision,
    InstancetypeMatcher,
    VirtualMachineClusterInstancetype,
    VirtualMachineInstancetype,
    instancetype_matcher,
)
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.cache.vmiorder import recorded_revision, revision_key
from gpu_binder.client.errors import AlreadyExists
from gpu_binder.sim.builders import owner_reference
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.objects import json_copy

Instancetype = VirtualMachineInstancetype | VirtualMachineClusterInstancetype


class InstancetypeError(Exception):
    """The VM's instancetype cannot be found or applied: its sync fails."""


def find_object(client: MemoryClient, vm: VirtualMachine, m: InstancetypeMatcher) -> Instancetype:
    found: Instancetype | None
    if m.cluster:
        found = client.peek(VirtualMachineClusterInstancetype, m.name)
    else:
        found = client.peek(VirtualMachineInstancetype, m.name, vm.metadata.namespace)
    if found is None:
        raise InstancetypeError(f"{m.kind} {m.name} not found")
    return found


def find_revision(client: MemoryClient, vm: VirtualMachine) -> ControllerRevision | None:
    """The recorded revision the VM reads its instancetype from (find/revision.go), by the
    binder's own rule for it (cache.vmiorder): KubeVirt's read path is one fact."""
    key = revision_key(vm)
    if not key:
        return None
    name = key.partition("/")[2]
    rev = client.peek(ControllerRevision, name, vm.metadata.namespace)
    if rev is None:
        raise InstancetypeError(f"ControllerRevision {name} not found")
    return recorded_revision(vm, {key: rev})


def instancetype_spec(client: MemoryClient, vm: VirtualMachine) -> dict[str, Any] | None:
    """The spec of the VM's instancetype as KubeVirt applies it, None when it names none."""
    m = instancetype_matcher(vm.raw)
    if m is None:
        return None
    rev = find_revision(client, vm)
    if rev is not None:
        spec = rev.data.get("spec")
        return spec if isinstance(spec, dict) else {}
    spec = find_object(client, vm, m).raw.get("spec")
    return spec if isinstance(spec, dict) else {}


async def sync_reference(client: MemoryClient, vm: VirtualMachine) -> dict[str, Any] | None:
    """The `status.instancetypeRef` to write, None when it stands (or the VM names none);
    InstancetypeError when the instancetype cannot be found."""
    m = instancetype_matcher(vm.raw)
    if m is None:
        return None
    if find_revision(client, vm) is None:
        find_object(client, vm, m)  # checkResourcesExist
    before = (vm.raw.get("status") or {}).get("instancetypeRef") or {}
    ref = json_copy(before) if before else {}
    if ref.get("name") != m.name or ref.get("kind") != m.kind:
        ref = {"name": m.name, "kind": m.kind}
    if m.revision_name and (ref.get("controllerRevisionRef") or {}).get("name") != m.revision_name:
        ref["controllerRevisionRef"] = {"name": m.revision_name}
    if not (ref.get("controllerRevisionRef") or {}).get("name"):
        ref["controllerRevisionRef"] = {"name": await _store(client, vm, m)}
    return None if ref == before else ref


async def _store(client: MemoryClient, vm: VirtualMachine, m: InstancetypeMatcher) -> str:
    obj = find_object(client, vm, m)
    meta = obj.metadata
    version = INSTANCETYPE_API_VERSION.rpartition("/")[2]
    name = f"{vm.metadata.name}-{meta.name}-{version}-{meta.uid}-{meta.generation}"
    data = {
        "apiVersion": INSTANCETYPE_API_VERSION,
        "kind": obj.KIND,
        # Labels, annotations, finalizers and owners are removed from the copy.
        "metadata": {
            k: v
            for k, v in meta.to_dict().items()
            if k not in ("labels", "annotations", "finalizers", "ownerReferences")
        },
        "spec": json_copy(obj.raw.get("spec") or {}),
    }
    revision = ControllerRevision.from_dict(
        {
            "apiVersion": REVISION_API_VERSION,
            "kind": "ControllerRevision",
            "metadata": {
                "name": name,
                "namespace": vm.metadata.namespace,
                "ownerReferences": [owner_reference(vm)],
                "labels": {
                    OBJECT_GENERATION_LABEL: str(meta.generation),
                    OBJECT_KIND_LABEL: obj.KIND,
                    OBJECT_NAME_LABEL: meta.name,
                    OBJECT_UID_LABEL: meta.uid,
                    OBJECT_VERSION_LABEL: version,
                },
            },
            "data": data,
        }
    )
    try:
        await client.create(revision)
    except AlreadyExists:
        existing = client.peek(ControllerRevision, name, vm.metadata.namespace)
        if existing is None or existing.data.get("spec") != data["spec"]:
            raise InstancetypeError(
                f"found existing ControllerRevision with unexpected data: {name}"
            ) from None
    return name


def apply_devices(instancetype: dict[str, Any], vmi_spec: dict[str, Any]) -> list[str]:
    """Copy the instancetype's GPUs and host devices into the VMI spec; the conflicts
    (spec paths) when the spec names its own."""
    conflicts = []
    devices = vmi_spec.setdefault("domain", {}).setdefault("devices", {})
    for section in ("gpus", "hostDevices"):
        entries = instancetype.get(section) or []
        if not entries:
            continue
        if devices.get(section):
            conflicts.append(f"spec.template.spec.domain.devices.{section}")
            continue
        devices[section] = json_copy({"e": entries})["e"]
    return conflicts


def with_instancetype(client: MemoryClient, vm: VirtualMachine) -> dict[str, Any]:
    """The VM's template spec with its instancetype applied (ApplyToVM), for comparing
    what a start would run; the template's own when none applies."""
    spec = json_copy(((vm.raw.get("spec") or {}).get("template") or {}).get("spec") or {})
    try:
        it = instancetype_spec(client, vm)
    except InstancetypeError:
        return spec
    if it is not None:
        apply_devices(it, spec)
    return spec
