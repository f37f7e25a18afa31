"""Views of the kinds gpu-binder reads but does not own: VirtualMachine, VMI and Node.

Only the fields the binder decides on are parsed; the raw object is kept for the webhook,
which patches the VMI as the user wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from gpu_binder.api.meta import ObjectMeta

KUBEVIRT_API_VERSION = "kubevirt.io/v1"
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
# runStrategy values under which KubeVirt keeps a VMI running.
RUNNING_STRATEGIES = frozenset({"Always", "RerunOnFailure", "Once"})


def _gpu_names(spec: dict[str, Any]) -> tuple[str, ...]:
    devices = spec.get("domain", {}).get("devices", {}) or {}
    names: list[str] = []
    for section in ("gpus", "hostDevices"):
        for entry in devices.get(section) or ():
            if isinstance(entry, dict) and isinstance(entry.get("deviceName"), str):
                names.append(entry["deviceName"])
    return tuple(names)


def _time(raw: Any) -> datetime | None:
    if not raw:
        return None
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class VirtualMachine:
    """The order: a VM's GPUs are its template's entries naming a class's resourceName."""

    KIND: ClassVar[str] = "VirtualMachine"
    PLURAL: ClassVar[str] = "virtualmachines"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMeta
    running: bool
    device_names: tuple[str, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VirtualMachine:
        spec = raw.get("spec") or {}
        strategy = spec.get("runStrategy")
        running = bool(spec.get("running")) or strategy in RUNNING_STRATEGIES
        template = (spec.get("template") or {}).get("spec") or {}
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            running=running,
            device_names=_gpu_names(template),
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class VirtualMachineInstance:
    """A running VM. Live while not Succeeded/Failed and not deleted."""

    KIND: ClassVar[str] = "VirtualMachineInstance"
    PLURAL: ClassVar[str] = "virtualmachineinstances"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMeta
    phase: str
    node_name: str
    device_names: tuple[str, ...]
    finished_at: datetime | None
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def live(self) -> bool:
        return self.phase not in ENDED_PHASES and self.metadata.deletion_timestamp is None

    @property
    def vm_name(self) -> str | None:
        """The owning VirtualMachine's name; None for a VMI that is its own order."""
        owner = self.metadata.owner("VirtualMachine")
        return owner.name if owner else None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VirtualMachineInstance:
        status = raw.get("status") or {}
        phase = str(status.get("phase") or "Pending")
        finished: datetime | None = None
        for t in status.get("phaseTransitionTimestamps") or ():
            if isinstance(t, dict) and t.get("phase") in ENDED_PHASES:
                finished = _time(t.get("phaseTransitionTimestamp"))
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            phase=phase,
            node_name=str(status.get("nodeName") or ""),
            device_names=_gpu_names(raw.get("spec") or {}),
            finished_at=finished,
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class Node:
    KIND: ClassVar[str] = "Node"
    PLURAL: ClassVar[str] = "nodes"
    NAMESPACED: ClassVar[bool] = False

    metadata: ObjectMeta
    ready: bool
    # When Ready last changed: a node NotReady longer than lostGrace loses its devices.
    ready_since: datetime | None
    unschedulable: bool
    allocatable: dict[str, int]
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.metadata.name

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Node:
        status = raw.get("status") or {}
        ready, since = False, None
        for c in status.get("conditions") or ():
            if isinstance(c, dict) and c.get("type") == "Ready":
                ready = c.get("status") == "True"
                since = _time(c.get("lastTransitionTime"))
        allocatable: dict[str, int] = {}
        for k, v in (status.get("allocatable") or {}).items():
            try:
                allocatable[k] = int(str(v))
            except ValueError:
                continue  # CPU and memory quantities; the binder counts only device units
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            ready=ready,
            ready_since=since,
            unschedulable=bool((raw.get("spec") or {}).get("unschedulable")),
            allocatable=allocatable,
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}
