"""A view of the Pods that carry a VMI's devices: KubeVirt's virt-launcher pod and its
WaitForFirstConsumer temporary pod.

KubeVirt renders both from the VMI (kubevirt/kubevirt
`pkg/virt-controller/services/template.go`, `renderLaunchManifest`; the temporary pod is
the same manifest with `tempPod` set): every `gpus[]` / `hostDevices[]` entry becomes one
unit of its `deviceName` in the compute container's resources, the pod is labelled
`kubevirt.io=virt-launcher` and `kubevirt.io/created-by=<VMI uid>`, and owned by the VMI.
The binder and its webhook read only what decides where a pod's GPUs come from.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from gpu_binder.api.meta import ObjectMeta

# The labels KubeVirt puts on every pod it renders for a VMI
# (staging/src/kubevirt.io/api/core/v1/types.go: AppLabel, CreatedByLabel).
APP_LABEL = "kubevirt.io"
LAUNCHER = "virt-launcher"
CREATED_BY_LABEL = "kubevirt.io/created-by"
VMI_KIND = "VirtualMachineInstance"
# Resource names every pod may carry without being an extended resource.
_NATIVE = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


def _units(raw: Any) -> int:
    """Units of an extended resource: whole numbers only (the API server refuses others)."""
    try:
        return int(str(raw))
    except ValueError:
        return 0


def extended_resources(spec: dict[str, Any]) -> Counter[str]:
    """Units of every extended resource the pod's containers hold, as the scheduler counts
    them: the sum over containers, or the largest init container if that is more.

    Limits are read, requests where a container gives only those: for extended resources
    the two must be equal (the API server defaults requests from limits)."""

    def of(container: Any) -> Counter[str]:
        out: Counter[str] = Counter()
        if not isinstance(container, dict):
            return out
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            for name, value in (resources.get(part) or {}).items():
                if name in out or name in _NATIVE or name.startswith("hugepages-"):
                    continue
                if "/" in name:
                    out[name] = _units(value)
        return out

    total: Counter[str] = Counter()
    for c in spec.get("containers") or ():
        total.update(of(c))
    for c in spec.get("initContainers") or ():
        for name, n in of(c).items():
            total[name] = max(total[name], n)
    return +total


def _scheduled_at(status: dict[str, Any]) -> datetime | None:
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            stamp = c.get("lastTransitionTime")
            try:
                return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None
            except ValueError:
                return None
    return None


@dataclass(frozen=True, slots=True)
class Pod:
    KIND: ClassVar[str] = "Pod"
    PLURAL: ClassVar[str] = "pods"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMeta
    node_name: str
    phase: str
    # Units per extended resource name (see extended_resources).
    resources: Counter[str]
    raw: dict[str, Any] = field(compare=False, repr=False)
    # When it was bound to its node: its PodScheduled condition's transition, which the
    # API server stamps at the binding (pkg/registry/core/pod/storage/storage.go
    # BindingREST.setPodNodeAndMetadata, by podutil.UpdatePodCondition) and no
    # tenant can write (pods/status).
    scheduled_at: datetime | None = None

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def vmi_uid(self) -> str:
        """The uid of the VMI the pod was rendered for: its VMI owner's, else the
        created-by label's; "" for a pod of no VMI."""
        owner = self.metadata.owner(VMI_KIND)
        if owner is not None:
            return owner.uid
        return self.metadata.labels.get(CREATED_BY_LABEL, "")

    @property
    def vmi_name(self) -> str:
        """The name of its VMI owner, "" when it has none."""
        owner = self.metadata.owner(VMI_KIND)
        return owner.name if owner is not None else ""

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Pod:
        spec = raw.get("spec") or {}
        # At CREATE KubeVirt's pods carry generateName only; the API server names them after
        # admission, so the pod webhook reads them with no name.
        meta = {"name": "", **(raw.get("metadata") or {})}
        return cls(
            metadata=ObjectMeta.model_validate(meta),
            node_name=str(spec.get("nodeName") or ""),
            phase=str((raw.get("status") or {}).get("phase") or "Pending"),
            resources=extended_resources(spec),
            raw=raw,
            scheduled_at=_scheduled_at(raw.get("status") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}
