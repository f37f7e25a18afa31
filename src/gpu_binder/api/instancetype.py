"""Views of KubeVirt's instancetypes and of the ControllerRevisions that record them.

A VM names an instancetype in `spec.instancetype` (`name`, `kind`, optional
`revisionName`). KubeVirt's VM controller stores a copy of the instancetype in a
ControllerRevision owned by the VM and records its name in
`status.instancetypeRef.controllerRevisionRef.name` (kubevirt/kubevirt
`pkg/instancetype/revision/store.go`, `storeInstancetypeRevision`); from then on the VM
reads the instancetype from that revision, not from the live object
(`pkg/instancetype/find/spec.go`, `specFinder.Find`; `find/revision.go`,
`revisionFinder.Find`), so a later edit of the instancetype changes no VM that recorded
one. `ApplyToVMI` (`pkg/instancetype/apply/gpu.go`, `hostdevices.go`) copies the
instancetype's `spec.gpus` and `spec.hostDevices` into the VMI; a template naming its
own GPUs (or host devices) beside an instancetype that has some is a conflict, and the
VMI is not created.

Only what decides a VM's GPUs is parsed; `raw` keeps the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from gpu_binder.api.meta import ObjectMeta

INSTANCETYPE_GROUP = "instancetype.kubevirt.io"
INSTANCETYPE_API_VERSION = f"{INSTANCETYPE_GROUP}/v1beta1"
INSTANCETYPE_KIND = "VirtualMachineInstancetype"
CLUSTER_INSTANCETYPE_KIND = "VirtualMachineClusterInstancetype"
# The labels KubeVirt puts on an instancetype's ControllerRevision
# (staging/src/kubevirt.io/api/instancetype/register.go).
REVISION_OBJECT_NAME_LABEL = f"{INSTANCETYPE_GROUP}/object-name"
REVISION_OBJECT_KIND_LABEL = f"{INSTANCETYPE_GROUP}/object-kind"
REVISION_OBJECT_UID_LABEL = f"{INSTANCETYPE_GROUP}/object-uid"
REVISION_OBJECT_GENERATION_LABEL = f"{INSTANCETYPE_GROUP}/object-generation"
REVISION_OBJECT_VERSION_LABEL = f"{INSTANCETYPE_GROUP}/object-version"


def device_names_of(spec: Any) -> tuple[str, ...]:
    """The deviceNames of an instancetype spec's `gpus` then `hostDevices` entries."""
    if not isinstance(spec, dict):
        return ()
    names: list[str] = []
    for section in ("gpus", "hostDevices"):
        for entry in spec.get(section) or ():
            if isinstance(entry, dict) and isinstance(entry.get("deviceName"), str):
                names.append(entry["deviceName"])
    return tuple(names)


@dataclass(frozen=True, slots=True)
class VirtualMachineInstancetype:
    """A namespaced instancetype (instancetype.kubevirt.io/v1beta1)."""

    KIND: ClassVar[str] = INSTANCETYPE_KIND
    PLURAL: ClassVar[str] = "virtualmachineinstancetypes"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMeta
    # The deviceNames of its spec.gpus, then spec.hostDevices.
    device_names: tuple[str, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VirtualMachineInstancetype:
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            device_names=device_names_of(raw.get("spec")),
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class VirtualMachineClusterInstancetype:
    """A cluster-scoped instancetype: the kind a VM's `spec.instancetype` means when it
    names none."""

    KIND: ClassVar[str] = CLUSTER_INSTANCETYPE_KIND
    PLURAL: ClassVar[str] = "virtualmachineclusterinstancetypes"
    NAMESPACED: ClassVar[bool] = False

    metadata: ObjectMeta
    device_names: tuple[str, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VirtualMachineClusterInstancetype:
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            device_names=device_names_of(raw.get("spec")),
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class ControllerRevision:
    """An apps/v1 ControllerRevision; KubeVirt keeps two sorts per VM: the instancetype
    copy (its `data` is the whole instancetype object) and the VM spec at each start
    (`revision-start-vm-<uid>-<generation>`, its `data` a `{"spec": …}`)."""

    KIND: ClassVar[str] = "ControllerRevision"
    PLURAL: ClassVar[str] = "controllerrevisions"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMeta
    revision: int
    data: dict[str, Any] = field(compare=False, repr=False)
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def instancetype_kind(self) -> str:
        """The instancetype kind the revision holds a copy of, "" for any other data."""
        kind = self.data.get("kind")
        if kind in (INSTANCETYPE_KIND, CLUSTER_INSTANCETYPE_KIND):
            return str(kind)
        return ""

    @property
    def instancetype_device_names(self) -> tuple[str, ...]:
        """The GPU and host-device names of the instancetype copy it holds (() if none)."""
        return device_names_of(self.data.get("spec")) if self.instancetype_kind else ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ControllerRevision:
        data = raw.get("data")
        revision = raw.get("revision")
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            revision=revision if isinstance(revision, int) else 0,
            data=data if isinstance(data, dict) else {},
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class InstancetypeMatcher:
    """A VM's `spec.instancetype`: which instancetype it names, and the revision it
    pins, if any."""

    name: str
    # VirtualMachineInstancetype or VirtualMachineClusterInstancetype (the default).
    kind: str
    revision_name: str = ""

    @property
    def cluster(self) -> bool:
        return self.kind.lower() not in (
            INSTANCETYPE_KIND.lower(),
            "virtualmachineinstancetypes",
        )


def instancetype_matcher(vm_raw: dict[str, Any]) -> InstancetypeMatcher | None:
    """The instancetype a VM (in wire form) names, or None."""
    matcher = (vm_raw.get("spec") or {}).get("instancetype")
    if not isinstance(matcher, dict) or not matcher.get("name"):
        return None
    return InstancetypeMatcher(
        name=str(matcher["name"]),
        kind=str(matcher.get("kind") or CLUSTER_INSTANCETYPE_KIND),
        revision_name=str(matcher.get("revisionName") or ""),
    )


def recorded_revision(vm_raw: dict[str, Any]) -> str:
    """The name of the ControllerRevision KubeVirt reads the VM's instancetype from, ""
    while none is recorded: `spec.instancetype.revisionName` when given, else
    `status.instancetypeRef.controllerRevisionRef.name` (find/revision.go,
    `revisionFinder.Find`, which also checks that revision's object-name label against
    the matcher: see `revision_matches`)."""
    matcher = instancetype_matcher(vm_raw)
    if matcher is None:
        return ""
    if matcher.revision_name:
        return matcher.revision_name
    ref = ((vm_raw.get("status") or {}).get("instancetypeRef") or {}).get(
        "controllerRevisionRef"
    ) or {}
    return str(ref.get("name") or "")


def revision_matches(vm_raw: dict[str, Any], revision: ControllerRevision) -> bool:
    """Whether a status-recorded revision is of the instancetype the VM names now
    (revisionFinder.Find ignores one recorded for an instancetype since renamed)."""
    matcher = instancetype_matcher(vm_raw)
    if matcher is None:
        return False
    if matcher.revision_name:
        return matcher.revision_name == revision.metadata.name
    return revision.metadata.labels.get(REVISION_OBJECT_NAME_LABEL) == matcher.name
