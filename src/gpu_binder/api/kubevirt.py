"""Views of the kinds gpu-binder reads but does not own: VirtualMachine, VMI and Node.

Only the fields the binder decides on are parsed; the raw object is kept for the webhook,
which patches the VMI as the user wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

from gpu_binder.api.instancetype import device_names
from gpu_binder.api.meta import ObjectMeta, field_written_at
from gpu_binder.api.quantity import QuantityError, byte_count, millicores
from gpu_binder.api.types import CLASSES_ANNOTATION

KUBEVIRT_API_VERSION = "kubevirt.io/v1"
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
_SECOND = timedelta(seconds=1)
# The phases of a VMI whose launcher pod holds its node's devices.
STARTED_PHASES = frozenset({"Scheduled", "Running"})
# runStrategy values under which KubeVirt starts a VMI for a VM that has none.
RUNNING_STRATEGIES = frozenset({"Always", "RerunOnFailure", "Once"})
# Every runStrategy (staging/src/kubevirt.io/api/core/v1/types.go).
ALWAYS, HALTED, MANUAL = "Always", "Halted", "Manual"
RERUN_ON_FAILURE, ONCE, WAIT_AS_RECEIVER = "RerunOnFailure", "Once", "WaitAsReceiver"


def _section_names(spec: dict[str, Any], section: str) -> tuple[str, ...]:
    devices = (spec.get("domain") or {}).get("devices") or {}
    entries = devices.get(section) if isinstance(devices, dict) else None
    return device_names(entries)


def _gpu_names(spec: dict[str, Any]) -> tuple[str, ...]:
    return _section_names(spec, "gpus") + _section_names(spec, "hostDevices")


def _run_strategy(spec: dict[str, Any]) -> str:
    """The runStrategy KubeVirt runs the VM by (types.go, VirtualMachine.RunStrategy): the
    deprecated spec.running maps true to Always and false to Halted; neither means Halted;
    both is an error ("" here), under which KubeVirt starts nothing."""
    running, strategy = spec.get("running"), spec.get("runStrategy")
    if running is not None and strategy is not None:
        return ""
    if running is not None:
        return ALWAYS if running is True else HALTED
    return str(strategy) if strategy else HALTED


def _quantity(raw: Any, parse: Any) -> int | None:
    if raw is None or isinstance(raw, bool):
        return None
    try:
        value: int = parse(raw)
    except (QuantityError, TypeError):
        return None
    return max(value, 0)


def _requests(spec: dict[str, Any]) -> tuple[int, int]:
    """(CPU millicores, memory bytes) the VM asks of its node: the domain's resource
    requests, else its vCPUs (sockets × cores × threads) and guest memory; 0 if unsaid.

    KubeVirt adds its own overhead to the launcher pod; the binder counts what the VM
    asks for, which is what a tenant can read in the VM and what differs between orders.
    """
    domain = spec.get("domain") or {}
    requests = (domain.get("resources") or {}).get("requests") or {}
    cpu = _quantity(requests.get("cpu"), millicores)
    if cpu is None and isinstance(domain.get("cpu"), dict):
        topology = domain["cpu"]
        vcpus = 1
        for part in ("sockets", "cores", "threads"):
            n = topology.get(part)
            vcpus *= n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
        cpu = vcpus * 1000
    memory = _quantity(requests.get("memory"), byte_count)
    if memory is None:
        memory = _quantity((domain.get("memory") or {}).get("guest"), byte_count)
    return cpu or 0, memory or 0


def _alternatives(*annotations: Any) -> tuple[str, ...]:
    """The classes named by the first gpu.cozystack.io/classes annotation found, in order."""
    for a in annotations:
        value = a.get(CLASSES_ANNOTATION) if isinstance(a, dict) else None
        if isinstance(value, str):
            names = [n.strip() for n in value.split(",")]
            return tuple(dict.fromkeys(n for n in names if n))
    return ()


def _mapping(raw: Any) -> dict[str, Any]:
    return raw if isinstance(raw, dict) else {}


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
    # Whether KubeVirt starts a VMI for it when it has none (Always, RerunOnFailure, Once);
    # whether it should hold GPUs now is set_to_start's to say, which reads its VMI too.
    running: bool
    # The template's entries, gpus then hostDevices; those of its instancetype are read
    # from the revision KubeVirt recorded (see api.instancetype, cache.vmiorder).
    device_names: tuple[str, ...]
    raw: dict[str, Any] = field(compare=False, repr=False)
    # What the VM asks of its node besides GPUs (see _requests).
    cpu_milli: int = 0
    memory_bytes: int = 0
    # Classes that may serve its GPUs instead of the one its entries name, from the
    # gpu.cozystack.io/classes annotation on the VM or its template (see placement.options).
    alternatives: tuple[str, ...] = ()
    template_gpus: tuple[str, ...] = ()
    template_host_devices: tuple[str, ...] = ()
    # spec.instancetype: the name of the instancetype, and the revision it pins if any.
    instancetype: str = ""
    instancetype_revision: str = ""
    # status.instancetypeRef.controllerRevisionRef.name: the revision KubeVirt recorded.
    recorded_revision: str = ""
    # The runStrategy as KubeVirt reads it (see _run_strategy), the one its status last
    # synced, and the first state change request: ("Start", "") or ("Stop", VMI uid).
    run_strategy: str = HALTED
    status_run_strategy: str = ""
    state_change: tuple[str, str] = ("", "")

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VirtualMachine:
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        strategy = spec.get("runStrategy")
        running = bool(spec.get("running")) or strategy in RUNNING_STRATEGIES
        template = spec.get("template") or {}
        template_spec = template.get("spec") or {}
        meta = raw.get("metadata") or {}
        cpu, memory = _requests(template_spec)
        matcher = _mapping(spec.get("instancetype"))
        revision_ref = _mapping(
            _mapping(status.get("instancetypeRef")).get("controllerRevisionRef")
        )
        requests = status.get("stateChangeRequests") or ()
        first = requests[0] if requests and isinstance(requests[0], dict) else {}
        return cls(
            metadata=ObjectMeta.model_validate(meta),
            running=running,
            device_names=_gpu_names(template_spec),
            raw=raw,
            cpu_milli=cpu,
            memory_bytes=memory,
            alternatives=_alternatives(
                meta.get("annotations"), (template.get("metadata") or {}).get("annotations")
            ),
            template_gpus=_section_names(template_spec, "gpus"),
            template_host_devices=_section_names(template_spec, "hostDevices"),
            instancetype=str(matcher.get("name") or ""),
            instancetype_revision=str(matcher.get("revisionName") or ""),
            recorded_revision=str(revision_ref.get("name") or ""),
            run_strategy=_run_strategy(spec),
            status_run_strategy=str(status.get("runStrategy") or ""),
            state_change=(str(first.get("action") or ""), str(first.get("uid") or "")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


@dataclass(frozen=True, slots=True)
class VirtualMachineInstance:
    """A running VM. Live until it is Succeeded/Failed or gone from the API.

    A deletionTimestamp does not end it: KubeVirt then shuts the guest down (up to its
    terminationGracePeriodSeconds) and QEMU holds its GPUs until the launcher pod exits;
    only then does the VMI reach Succeeded/Failed, or go.
    """

    KIND: ClassVar[str] = "VirtualMachineInstance"
    PLURAL: ClassVar[str] = "virtualmachineinstances"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMeta
    phase: str
    node_name: str
    device_names: tuple[str, ...]
    finished_at: datetime | None
    raw: dict[str, Any] = field(compare=False, repr=False)
    # When its launcher pod got a node, and with it the node's devices (Scheduled).
    started_at: datetime | None = None
    # When the API server stored its phase, to the second, by the server's clock (None
    # without managedFields); see `finish`.
    phase_written_at: datetime | None = None
    # For a standalone VMI, its own order: what it asks of its node, and its alternatives.
    cpu_milli: int = 0
    memory_bytes: int = 0
    alternatives: tuple[str, ...] = ()
    # spec.evictionStrategy ("" when it sets none: the KubeVirt CR's then holds).
    eviction_strategy: str = ""
    # Set by the binder's cache, never read from the API: it reads Succeeded/Failed, but a
    # launcher pod carrying its devices still runs (cache.launchers), so it is in use.
    held_by_launcher: bool = False
    # Derived once: every pass asks for them, many times.
    key: str = field(init=False, compare=False, repr=False)
    vm_name: str | None = field(init=False, compare=False, repr=False)
    # That VirtualMachine's uid as the ownerReference says it ("" for a standalone VMI).
    vm_uid: str = field(init=False, compare=False, repr=False)
    # The order it runs for: its VirtualMachine's key, or its own when it has none.
    order_key: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        ns = self.metadata.namespace
        object.__setattr__(self, "key", f"{ns}/{self.metadata.name}")
        owner = self.metadata.owner("VirtualMachine")
        # The owning VirtualMachine's name; None for a VMI that is its own order.
        object.__setattr__(self, "vm_name", owner.name if owner else None)
        object.__setattr__(self, "vm_uid", owner.uid if owner else "")
        object.__setattr__(self, "order_key", f"{ns}/{owner.name}" if owner else self.key)

    @property
    def live(self) -> bool:
        """Not Succeeded/Failed: it runs, or may yet run, and holds its VM's set; a
        deletionTimestamp does not end it (see the class docstring). Nor does a phase its
        launcher pod belies (held_by_launcher)."""
        return self.phase not in ENDED_PHASES or self.held_by_launcher

    @property
    def finish(self) -> datetime | None:
        """When it ended, as well as the object tells: None while it is not Succeeded/Failed.

        Its phaseTransitionTimestamp says it by the clock of the node or controller that
        wrote it, which may be minutes off. The API server stamped the write of the phase
        by its own clock, to the second (phase_written_at), so the end is taken in that
        second, the writer's stamp only as far as it falls inside it. The server's stamp
        is its writer's last change, which is the phase's for virt-handler (it writes
        nothing once a VMI is final: pkg/virt-handler/vm.go, updateVMIStatus) but may be
        later for virt-controller (its finalizer's removal). Without the server's stamp
        (managedFields stripped) the writer's stands alone."""
        if self.phase not in ENDED_PHASES:
            return None
        stamped = self.phase_written_at
        if stamped is None:
            return self.finished_at
        if self.finished_at is None:
            return stamped
        return min(max(self.finished_at, stamped), stamped + _SECOND)

    @property
    def being_deleted(self) -> bool:
        """On its way out (deletionTimestamp set): live until it ends, but no new order."""
        return self.metadata.deletion_timestamp is not None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VirtualMachineInstance:
        status = raw.get("status") or {}
        phase = str(status.get("phase") or "Pending")
        finished: datetime | None = None
        started: datetime | None = None
        for t in status.get("phaseTransitionTimestamps") or ():
            if not isinstance(t, dict):
                continue
            at = _time(t.get("phaseTransitionTimestamp"))
            if t.get("phase") in ENDED_PHASES:
                finished = at
            elif t.get("phase") in STARTED_PHASES and at is not None:
                started = at if started is None else min(started, at)
        spec = raw.get("spec") or {}
        meta = raw.get("metadata") or {}
        cpu, memory = _requests(spec)
        return cls(
            metadata=ObjectMeta.model_validate(meta),
            phase=phase,
            node_name=str(status.get("nodeName") or ""),
            device_names=_gpu_names(spec),
            finished_at=finished,
            started_at=started,
            phase_written_at=field_written_at(meta, ("status", "phase")),
            raw=raw,
            cpu_milli=cpu,
            memory_bytes=memory,
            alternatives=_alternatives(meta.get("annotations")),
            eviction_strategy=str(spec.get("evictionStrategy") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}


def set_to_start(vm: VirtualMachine, vmi: VirtualMachineInstance | None) -> bool:
    """Whether KubeVirt keeps the VM running, or starts it: a VM for which this is False is
    stopped, and the reservation of its GPUs runs (releaseAfterStopped).

    `vmi` is the VM's VMI, in any phase (KubeVirt's VM controller reads the VMI named after
    the VM), or None. Follows virt-controller's isSetToStart and syncRunStrategy
    (pkg/virt-controller/watch/vm/vm.go): Always runs (an ended VMI is replaced); Halted
    never; RerunOnFailure runs unless its VMI Succeeded, and with no VMI only on a start
    request or before KubeVirt first synced the strategy (status.runStrategy); Once runs
    until it has a VMI and not after it ended; Manual runs on a start request and while its
    VMI lives with no stop request for it (one that ended is not started again without a
    request, so its VM is stopped); WaitAsReceiver gets a receiver VMI at once, which needs
    its GPUs as any start does. Both spec.running and runStrategy set is an error under
    which KubeVirt starts nothing.
    """
    strategy, (action, uid) = vm.run_strategy, vm.state_change
    if strategy in (ALWAYS, WAIT_AS_RECEIVER):
        return True
    if strategy == RERUN_ON_FAILURE:
        if vmi is not None:
            return vmi.phase != "Succeeded"
        return action == "Start" or vm.status_run_strategy != RERUN_ON_FAILURE
    if strategy == ONCE:
        return vmi is None
    if strategy == MANUAL:
        if vmi is not None:
            return vmi.live and not (action == "Stop" and uid == vmi.metadata.uid)
        return action == "Start"
    return False


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
    # Allocatable CPU (millicores) and memory (bytes); None when the node does not say,
    # which placement reads as no limit.
    cpu_milli: int | None = None
    memory_bytes: int | None = None

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
        quantities = status.get("allocatable") or {}
        for k, v in quantities.items():
            try:
                allocatable[k] = int(str(v))
            except ValueError:
                continue  # a quantity with a unit ("256Gi"): cpu and memory are read below
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            ready=ready,
            ready_since=since,
            unschedulable=bool((raw.get("spec") or {}).get("unschedulable")),
            allocatable=allocatable,
            raw=raw,
            cpu_milli=_quantity(quantities.get("cpu"), millicores),
            memory_bytes=_quantity(quantities.get("memory"), byte_count),
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.raw, "metadata": self.metadata.to_dict()}
