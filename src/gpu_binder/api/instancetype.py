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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from gpu_binder.api.meta import ObjectMeta

REVISION_API_VERSION = "apps/v1"
INSTANCETYPE_GROUP = "instancetype.kubevirt.io"
# Labels KubeVirt puts on the revisions it stores
# (staging/src/kubevirt.io/api/instancetype/register.go).
OBJECT_KIND_LABEL = f"{INSTANCETYPE_GROUP}/object-kind"
OBJECT_NAME_LABEL = f"{INSTANCETYPE_GROUP}/object-name"
INSTANCETYPE_KINDS = ("VirtualMachineInstancetype", "VirtualMachineClusterInstancetype")
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
            f"{INSTANCETYPE_GROUP}/object-version": "v1beta1",
        },
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": REVISION_API_VERSION,
        "kind": "ControllerRevision",
        "metadata": meta,
        "data": {
            "apiVersion": f"{INSTANCETYPE_GROUP}/v1beta1",
            "kind": kind,
            "metadata": {"name": instancetype},
            "spec": spec,
        },
        "revision": 1,
    }
