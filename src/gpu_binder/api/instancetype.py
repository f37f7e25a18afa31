"""A view of the ControllerRevisions in which KubeVirt records a VM's instancetype.

KubeVirt never applies the live VirtualMachineInstancetype or
VirtualMachineClusterInstancetype to a VM's VMIs: the VM controller first stores a copy of
it in a ControllerRevision owned by the VM (kubevirt/kubevirt
`pkg/instancetype/revision/store.go`, `CreateControllerRevision`: data is the object
itself, apiVersion instancetype.kubevirt.io/v1beta1 with its spec; labels name the
object's kind, name, uid, generation and version), points the VM's
`status.instancetypeRef.controllerRevisionRef` at it, and applies that copy to every VMI
it starts (`pkg/instancetype/find/revision.go` and `find/spec.go`: the revision named by
`spec.instancetype.revisionName`, else by the status ref when its object-name label is
the instancetype's name; `pkg/instancetype/apply/gpu.go`, `hostdevices.go`: its
`spec.gpus` / `spec.hostDevices` become the VMI's, unless the template has its own,
which is a conflict KubeVirt refuses). An edit of the live instancetype reaches a VM only
when its revision is replaced, so the binder reads the revision, never the live object.

The instancetype kinds themselves (`VirtualMachineInstancetype`, namespaced, and
`VirtualMachineClusterInstancetype`, the kind a VM's `spec.instancetype` means when it
names none) are viewed here too, for the embedded cluster's VM controller, which stores
revisions of them as KubeVirt does. Only what decides a VM's GPUs is parsed; `raw` keeps
the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from gpu_binder.api.meta import ObjectMeta

REVISION_API_VERSION = "apps/v1"
INSTANCETYPE_GROUP = "instancetype.kubevirt.io"
# The only served version (crds.go; instancetype.LatestVersion in register.go).
INSTANCETYPE_API_VERSION = f"{INSTANCETYPE_GROUP}/v1beta1"
INSTANCETYPE_KIND = "VirtualMachineInstancetype"
CLUSTER_INSTANCETYPE_KIND = "VirtualMachineClusterInstancetype"
# Labels KubeVirt puts on the revisions it stores
# (staging/src/kubevirt.io/api/instancetype/register.go).
OBJECT_KIND_LABEL = f"{INSTANCETYPE_GROUP}/object-kind"
OBJECT_NAME_LABEL = f"{INSTANCETYPE_GROUP}/object-name"
OBJECT_UID_LABEL = f"{INSTANCETYPE_GROUP}/object-uid"
OBJECT_GENERATION_LABEL = f"{INSTANCETYPE_GROUP}/object-generation"
OBJECT_VERSION_LABEL = f"{INSTANCETYPE_GROUP}/object-version"
INSTANCETYPE_KINDS = (INSTANCETYPE_KIND, CLUSTER_INSTANCETYPE_KIND)
# The revisions the binder watches: those of instancetypes only, by KubeVirt's own label,
# so neither preferences' revisions nor every StatefulSet's and DaemonSet's history enter
# its cache.
INSTANCETYPE_REVISIONS = f"{OBJECT_KIND_LABEL} in ({','.join(INSTANCETYPE_KINDS)})"


def device_names(entries: Any) -> tuple[str, ...]:
    """The deviceName of each entry of a gpus[] or hostDevices[] list, in order."""
    if not isinstance(entries, list):
        return ()
    return tuple(
        e["deviceName"]
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("deviceName"), str)
    )


@dataclass(frozen=True, slots=True)
class ControllerRevision:
    """A recorded instancetype: what KubeVirt applies to the VM's VMIs."""

    KIND: ClassVar[str] = "ControllerRevision"
    PLURAL: ClassVar[str] = "controllerrevisions"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMeta
    # The device names of the recorded spec.gpus and spec.hostDevices; () for a revision
    # of anything else (a preference holds no devices).
    gpus: tuple[str, ...]
    host_devices: tuple[str, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def object_name(self) -> str:
        """The name of the instancetype it records (its object-name label)."""
        return self.metadata.labels.get(OBJECT_NAME_LABEL, "")

    @property
    def is_instancetype(self) -> bool:
        return self.metadata.labels.get(OBJECT_KIND_LABEL) in INSTANCETYPE_KINDS

    @property
    def data(self) -> dict[str, Any]:
        """The stored object: an instancetype, or for KubeVirt's VM-start revisions
        (`revision-start-vm-<uid>-<generation>`, vm.go) a `{"spec": <VM spec>}`."""
        data = self.raw.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def revision(self) -> int:
        revision = self.raw.get("revision")
        return revision if isinstance(revision, int) else 0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ControllerRevision:
        meta = ObjectMeta.model_validate(raw.get("metadata") or {})
        data = raw.get("data")
        spec: dict[str, Any] = {}
        if (
            isinstance(data, dict)
            and str(data.get("apiVersion", "")).startswith(f"{INSTANCETYPE_GROUP}/")
            and data.get("kind") in INSTANCETYPE_KINDS
            and isinstance(data.get("spec"), dict)
        ):
            spec = data["spec"]
        return cls(
            metadata=meta,
            gpus=device_names(spec.get("gpus")),
            host_devices=device_names(spec.get("hostDevices")),
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


def instancetype_revision_object(
    name: str,
    namespace: str,
    *,
    instancetype: str,
    kind: str = "VirtualMachineInstancetype",
    gpus: list[str] | tuple[str, ...] = (),
    host_devices: list[str] | tuple[str, ...] = (),
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ControllerRevision as KubeVirt stores one for a VM's instancetype (see the module
    docstring), for tests and the embedded cluster."""
    spec: dict[str, Any] = {"cpu": {"guest": 1}, "memory": {"guest": "1Gi"}}
    if gpus:
        spec["gpus"] = [{"name": f"gpu{i}", "deviceName": n} for i, n in enumerate(gpus)]
    if host_devices:
        spec["hostDevices"] = [
            {"name": f"hostdev{i}", "deviceName": n} for i, n in enumerate(host_devices)
        ]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            OBJECT_KIND_LABEL: kind,
            OBJECT_NAME_LABEL: instancetype,
            OBJECT_VERSION_LABEL: "v1beta1",
        },
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": REVISION_API_VERSION,
        "kind": "ControllerRevision",
        "metadata": meta,
        "data": {
            "apiVersion": INSTANCETYPE_API_VERSION,
            "kind": kind,
            "metadata": {"name": instancetype},
            "spec": spec,
        },
        "revision": 1,
    }


def _instancetype_devices(raw: dict[str, Any]) -> tuple[str, ...]:
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        return ()
    return device_names(spec.get("gpus")) + device_names(spec.get("hostDevices"))


@dataclass(frozen=True, slots=True)
class _Instancetype:
    """What gpu-binder reads of an instancetype of either scope."""

    metadata: ObjectMeta
    # The deviceNames of its spec.gpus, then spec.hostDevices.
    device_names: tuple[str, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Self:
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            device_names=_instancetype_devices(raw),
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class VirtualMachineInstancetype(_Instancetype):
    """A namespaced instancetype (instancetype.kubevirt.io/v1beta1)."""

    KIND: ClassVar[str] = INSTANCETYPE_KIND
    PLURAL: ClassVar[str] = "virtualmachineinstancetypes"
    NAMESPACED: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class VirtualMachineClusterInstancetype(_Instancetype):
    """A cluster-scoped instancetype: the kind a VM's `spec.instancetype` means when it
    names none."""

    KIND: ClassVar[str] = CLUSTER_INSTANCETYPE_KIND
    PLURAL: ClassVar[str] = "virtualmachineclusterinstancetypes"
    NAMESPACED: ClassVar[bool] = False


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
        return self.kind.lower() not in (INSTANCETYPE_KIND.lower(), "virtualmachineinstancetypes")


def instancetype_matcher(vm_raw: dict[str, Any]) -> InstancetypeMatcher | None:
    """The instancetype a VM (in wire form) names, or None; an empty kind is the cluster
    kind (pkg/instancetype/find/spec.go)."""
    matcher = (vm_raw.get("spec") or {}).get("instancetype")
    if not isinstance(matcher, dict) or not matcher.get("name"):
        return None
    return InstancetypeMatcher(
        name=str(matcher["name"]),
        kind=str(matcher.get("kind") or CLUSTER_INSTANCETYPE_KIND),
        revision_name=str(matcher.get("revisionName") or ""),
    )
