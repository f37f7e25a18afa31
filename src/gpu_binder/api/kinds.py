"""The registry of kinds the client serves: where each lives in the API and how to parse it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from gpu_binder.api.instancetype import (
    INSTANCETYPE_API_VERSION,
    REVISION_API_VERSION,
    ControllerRevision,
    VirtualMachineClusterInstancetype,
    VirtualMachineInstancetype,
)
from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.pod import Pod
from gpu_binder.api.quota import ResourceQuota
from gpu_binder.api.types import (
    API_VERSION,
    GPUBindRequest,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
)


class KubeObject(Protocol):
    """What every typed object offers: its metadata and its wire form."""

    @property
    def metadata(self) -> ObjectMeta: ...

    def to_dict(self) -> dict[str, Any]: ...


T = TypeVar("T", bound=KubeObject)


@dataclass(frozen=True, slots=True)
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool
    # Whether status is a subresource: updates of the object then leave status alone.
    status_subresource: bool
    parse: Callable[[dict[str, Any]], Any]

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


@dataclass(frozen=True, slots=True)
class KubeVirt:
    """The KubeVirt CR, whose permittedHostDevices the binder renders from the classes."""

    metadata: ObjectMeta
    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KubeVirt:
        return cls(metadata=ObjectMeta.model_validate(raw.get("metadata") or {}), raw=raw)

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class Event:
    """An events.k8s.io/v1 Event: a decision and its reason, in words, on an object."""

    metadata: ObjectMeta
    regarding: dict[str, str]
    reason: str
    note: str
    type: str = "Normal"
    action: str = "Binding"
    event_time: str = ""
    reporting_controller: str = "gpu.cozystack.io/gpu-binder"
    reporting_instance: str = "gpu-binder"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Event:
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            regarding={k: str(v) for k, v in (raw.get("regarding") or {}).items()},
            reason=str(raw.get("reason", "")),
            note=str(raw.get("note", "")),
            type=str(raw.get("type", "Normal")),
            action=str(raw.get("action", "")),
            event_time=str(raw.get("eventTime", "")),
            reporting_controller=str(raw.get("reportingController", "")),
            reporting_instance=str(raw.get("reportingInstance", "")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": self.metadata.to_dict(),
            "regarding": self.regarding,
            "reason": self.reason,
            "note": self.note,
            "type": self.type,
            "action": self.action,
            "eventTime": self.event_time,
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
        }


RESOURCES: dict[type[Any], Resource] = {
    GPUClass: Resource(API_VERSION, "GPUClass", "gpuclasses", False, True, GPUClass.model_validate),
    GPUDevice: Resource(
        API_VERSION, "GPUDevice", "gpudevices", False, True, GPUDevice.model_validate
    ),
    GPUBindRequest: Resource(
        API_VERSION, "GPUBindRequest", "gpubindrequests", True, True, GPUBindRequest.model_validate
    ),
    GPUUsageRecord: Resource(
        API_VERSION, "GPUUsageRecord", "gpuusagerecords", True, False, GPUUsageRecord.model_validate
    ),
    VirtualMachine: Resource(
        "kubevirt.io/v1", "VirtualMachine", "virtualmachines", True, True, VirtualMachine.from_dict
    ),
    VirtualMachineInstance: Resource(
        "kubevirt.io/v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
        True,
        True,
        VirtualMachineInstance.from_dict,
    ),
    Node: Resource("v1", "Node", "nodes", False, True, Node.from_dict),
    Pod: Resource("v1", "Pod", "pods", True, True, Pod.from_dict),
    ResourceQuota: Resource(
        "v1", "ResourceQuota", "resourcequotas", True, True, ResourceQuota.from_dict
    ),
    ControllerRevision: Resource(
        REVISION_API_VERSION,
        "ControllerRevision",
        "controllerrevisions",
        True,
        False,
        ControllerRevision.from_dict,
    ),
    KubeVirt: Resource("kubevirt.io/v1", "KubeVirt", "kubevirts", True, True, KubeVirt.from_dict),
    Event: Resource("events.k8s.io/v1", "Event", "events", True, False, Event.from_dict),
    VirtualMachineInstancetype: Resource(
        INSTANCETYPE_API_VERSION,
        "VirtualMachineInstancetype",
        "virtualmachineinstancetypes",
        True,
        False,
        VirtualMachineInstancetype.from_dict,
    ),
    VirtualMachineClusterInstancetype: Resource(
        INSTANCETYPE_API_VERSION,
        "VirtualMachineClusterInstancetype",
        "virtualmachineclusterinstancetypes",
        False,
        False,
        VirtualMachineClusterInstancetype.from_dict,
    ),
}


def resource_of(kind: type[Any]) -> Resource:
    try:
        return RESOURCES[kind]
    except KeyError:
        raise TypeError(f"{kind.__name__} is not a kind the client serves") from None


def parse(kind: type[T], raw: dict[str, Any]) -> T:
    """Parse a wire dict into the typed object, once, at the API edge."""
    return cast(T, resource_of(kind).parse(raw))
