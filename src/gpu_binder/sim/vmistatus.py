"""A VMI's status as KubeVirt writes it, and the finalizers KubeVirt puts on it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.sim.builders import iso
from gpu_binder.sim.retry import wire

# The VM controller's finalizer on the VMIs it creates (vm.go, startVMI), removed once
# the VMI is final (vm.go, updateStatus → removeVMIFinalizer).
VMI_FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"
# virt-api's on every VMI (vmi-mutator.go), removed by the VMI controller once the VMI is
# final and no pod of it is left (lifecycle.go, updateStatus).
FOREGROUND_FINALIZER = "kubevirt.io/foregroundDeleteVirtualMachine"
# staging/src/kubevirt.io/api/core/v1/types.go
NODE_NAME_LABEL = "kubevirt.io/nodeName"
MIGRATION_TARGET_ANNOTATION = "kubevirt.io/create-migration-target"
# What a controller writes first on an object it has not seen at the current API version
# (pkg/controller/controller.go, SetLatestApiVersionAnnotation), and returns: the object's
# event brings it back for the real sync.
API_VERSION_ANNOTATIONS = {
    "kubevirt.io/latest-observed-api-version": "v1",
    "kubevirt.io/storage-observed-api-version": "v1",
}


def observed(obj: Any) -> bool:
    """Whether the object carries the API version annotations
    (ObservedLatestApiVersionAnnotation)."""
    annotations = obj.metadata.annotations
    return all(annotations.get(k) == v for k, v in API_VERSION_ANNOTATIONS.items())


def with_api_version(obj: Any) -> Any:
    """obj with the API version annotations, for an update."""
    raw = wire(obj)
    annotations = raw["metadata"].setdefault("annotations", {})
    annotations.update(API_VERSION_ANNOTATIONS)
    return type(obj).from_dict(raw)


def with_phase(
    vmi: VirtualMachineInstance,
    phase: str,
    now: datetime | None,
    *,
    node: str | None = None,
    reason: str = "",
    message: str = "",
) -> VirtualMachineInstance:
    """vmi in a new phase; its transition time stamped by the writer's clock, `now`, the
    first time it enters the phase (pkg/controller/controller.go,
    SetVMIPhaseTransitionTimestamp keeps an existing stamp); None stamps nothing, as
    virt-controller's patch of a Scheduled or Running VMI does (lifecycle.go,
    prepareVMIPatch)."""
    raw = wire(vmi)
    status = raw.setdefault("status", {})
    changed = status.get("phase") != phase
    status["phase"] = phase
    if node is not None:
        status["nodeName"] = node
    if reason:
        status["reason"] = reason
        status["conditions"] = [
            {"type": "Ready", "status": "False", "reason": reason, "message": message}
        ]
    stamps = list(status.get("phaseTransitionTimestamps") or [])
    if now is not None and changed and not any(t.get("phase") == phase for t in stamps):
        stamps.append({"phase": phase, "phaseTransitionTimestamp": iso(now)})
        status["phaseTransitionTimestamps"] = stamps
    return VirtualMachineInstance.from_dict(raw)


def is_receiver(vmi: VirtualMachineInstance) -> bool:
    """A VMI created to receive a migration (runStrategy WaitAsReceiver): no pod until a
    migration source syncs it (types.go, IsMigrationTarget, IsMigrationTargetNodeLabelSet)."""
    return vmi.metadata.annotations.get(MIGRATION_TARGET_ANNOTATION) == "true"
