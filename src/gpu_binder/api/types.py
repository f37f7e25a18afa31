"""gpu-binder's own kinds (API group gpu.cozystack.io/v1alpha1), DESIGN §1.

These models are the one source of truth: the CRDs in deploy/crds/ are generated from
them (see crds.py), so a field added here reaches the schema with no second edit.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints, computed_field

from gpu_binder.api.meta import GENERATION_MAX, Condition, Model, ObjectMeta, parse_duration

GROUP = "gpu.cozystack.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
FINALIZER = f"{GROUP}/device"
# The finalizer the webhook puts on every VMI it admits with GPUs: the VMI object, and its
# finish time with it, stays until the binder has closed its usage records (DESIGN §2.6),
# even when KubeVirt ends and deletes it while no binder runs.
USAGE_FINALIZER = f"{GROUP}/usage"
# The VM annotation that asks to move a stopped VM's set to a node.
NODE_ANNOTATION = f"{GROUP}/node"
# The VMI annotation the webhook adds: the devices it was admitted with.
DEVICES_ANNOTATION = f"{GROUP}/devices"
# The VM (or template, or standalone VMI) annotation naming the classes any of which may
# serve its GPUs: "h100,a100". All GPUs of a set come from one of them (placement.options).
CLASSES_ANNOTATION = f"{GROUP}/classes"

PCI_ADDRESS_PATTERN = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"
HEX_ID_PATTERN = r"^0x[0-9a-f]{4}$"
# Kubernetes object names are DNS subdomains; the bound also caps the cost of CEL rules.
NAME_MAX = 253
UID_MAX = 128
# Namespaces are DNS labels.
NAMESPACE_MAX = 63
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# An extended resource name is a qualified name: a DNS-subdomain prefix (<= 253) and a
# name (<= 63), as the API server validates resource names in a pod's requests.
RESOURCE_NAME_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
RESOURCE_NAME_MAX = NAME_MAX + 1 + 63
# Resource name prefixes no class may take: the agent's per-slot resources (the slot
# space: gpu.cozystack.io/<vendor>-<device>-s<N>, handed out by slot only through the
# webhooks), KubeVirt's own devices (kvm, tun, vhost-net; the pod webhook's
# matchCondition leaves them out) and the kubernetes.io domain (not extended resources).
RESERVED_RESOURCE_PREFIXES = (f"{GROUP}/", "devices.kubevirt.io/")
# Hardware facts the agent reads from sysfs, bounded well above any real machine so that
# a forged GPUDevice cannot carry absurd values (issue 11): the kubelet's device plugin
# API and the slot resource names hold slots below 4096; Linux's MAX_NUMNODES is 1024.
SLOT_MAX = 4095
NUMA_NODE_MAX = 1023
IOMMU_GROUP_MAX = (1 << 20) - 1
MODEL_MAX = 256
DRIVER_MAX = 64
NVLINK_DOMAIN_MAX = 64
MESSAGE_MAX = 1024
# An order is one node's GPUs: no node holds more than this many.
COUNT_MAX = 64
# A stopped VM's reservation: at most ten years (an empty value keeps GPUs for as long
# as the VM exists). The pattern bounds the digits too (five per number, four numbers:
# at most 45 years), so no value overflows a timedelta or the 292 years of a Go duration,
# which the API server's CEL duration() would fail to convert.
RESERVATION_MAX = timedelta(hours=87600)
BOUNDED_DURATION_PATTERN = r"^([0-9]{1,5}(\.[0-9]{1,9})?(ms|h|m|s)){1,4}$"
DURATION_MAX_LENGTH = 48

HexID = Annotated[str, StringConstraints(pattern=HEX_ID_PATTERN, max_length=6)]
Name = Annotated[str, StringConstraints(max_length=NAME_MAX)]


class Phase(StrEnum):
    AVAILABLE = "Available"
    BOUND = "Bound"
    ATTACHED = "Attached"
    LOST = "Lost"
    CLEANING = "Cleaning"
    RELEASING = "Releasing"


class BindReason(StrEnum):
    ORDER = "Order"
    REQUEST = "Request"
    MOVE = "Move"
    REBIND = "Rebind"
    ADOPTED = "Adopted"


class Health(StrEnum):
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


# --- GPUClass -------------------------------------------------------------------------


class DeviceMatch(Model):
    vendor_id: str = Field("0x10de", alias="vendorID", pattern=HEX_ID_PATTERN, max_length=6)
    # Bounded so the CRD's uniqueness rule (quadratic in CEL) has a small, known cost.
    device_ids: tuple[HexID, ...] = Field((), alias="deviceIDs", max_length=64)
    # Node labels (keys are qualified names, values at most 63 characters); the key length
    # is a CEL rule in crdkinds, as a CRD schema cannot constrain map keys.
    node_selector: dict[str, Annotated[str, StringConstraints(max_length=63)]] = Field(
        {}, max_length=32
    )


class PlacementSpec(Model):
    # LeastStranded: the node (and, for an order accepting several classes, the class)
    # where the fewest free GPUs become unusable for the orders the cluster has; Pack: the
    # fullest node; Spread: the emptiest. See placement.policy and docs/PLACEMENT.md.
    policy: Literal["LeastStranded", "Pack", "Spread"] = "LeastStranded"
    topology: Literal["Node", "NUMA", "NVLink"] = "Node"


class ReservationSpec(Model):
    # Empty: a stopped VM keeps its GPUs for as long as it exists. At most RESERVATION_MAX
    # (a CEL rule in crdkinds; the pattern bounds the digits).
    release_after_stopped: str | None = Field(
        None, pattern=BOUNDED_DURATION_PATTERN, max_length=DURATION_MAX_LENGTH
    )


class GPUClassSpec(Model):
    # The KubeVirt device name VMs order the class by: an extended resource name outside
    # RESERVED_RESOURCE_PREFIXES (CEL rules in crdkinds).
    resource_name: str = Field(min_length=1, max_length=RESOURCE_NAME_MAX)
    match: DeviceMatch = DeviceMatch()
    placement: PlacementSpec = PlacementSpec()
    reservation: ReservationSpec = ReservationSpec()
    cleaning: Literal["Reset", "None"] = "Reset"
    pinning: Literal["Device", "Node"] = "Device"
    # Who puts the class's GPUs on vfio-pci. External: something else does (the GPU
    # Operator's vfio-manager, vfio-pci.ids= at boot); a GPU on another driver is
    # Unhealthy. Agent: the node agent binds them itself through sysfs (agent/vfio.py).
    vfio_binding: Literal["External", "Agent"] = "External"

    @property
    def release_after(self) -> timedelta | None:
        """The reservation of a stopped VM, at most RESERVATION_MAX.

        The API server refuses longer values; one stored before that rule existed is
        read as the longest allowed, where it used to overflow in the binder's pass.
        """
        raw = self.reservation.release_after_stopped
        if not raw:
            return None
        try:
            return min(parse_duration(raw), RESERVATION_MAX)
        except ValueError:
            return RESERVATION_MAX


# Counts of GPUs in a class's status: the binder writes them, bounded like any field.
Count = Annotated[int, Field(ge=0, le=1 << 30)]
CONDITIONS_MAX = 16


class GPUClassStatus(Model):
    devices: Count = 0
    available: Count = 0
    bound: Count = 0
    attached: Count = 0
    lost: Count = 0
    cleaning: Count = 0
    largest_free_set: Count = 0
    conditions: tuple[Condition, ...] = Field((), max_length=CONDITIONS_MAX)
    observed_generation: int = Field(0, ge=0, le=GENERATION_MAX)


class GPUClass(Model):
    KIND: ClassVar[str] = "GPUClass"
    PLURAL: ClassVar[str] = "gpuclasses"
    NAMESPACED: ClassVar[bool] = False

    api_version: str = API_VERSION
    kind: str = "GPUClass"
    metadata: ObjectMeta
    spec: GPUClassSpec
    status: GPUClassStatus = GPUClassStatus()


# --- GPUDevice ------------------------------------------------------------------------


class GPUDeviceSpec(Model):
    node_name: str = Field(min_length=1, max_length=NAME_MAX, pattern=DNS_SUBDOMAIN_PATTERN)
    pci_address: str = Field(pattern=PCI_ADDRESS_PATTERN, max_length=12)
    slot: int | None = Field(None, ge=0, le=SLOT_MAX)
    vendor_id: str = Field("0x10de", alias="vendorID", pattern=HEX_ID_PATTERN, max_length=6)
    device_id: str = Field(alias="deviceID", pattern=HEX_ID_PATTERN, max_length=6)
    model: str = Field("", max_length=MODEL_MAX)
    # None where sysfs says -1 (no NUMA) or nothing.
    numa_node: int | None = Field(None, ge=0, le=NUMA_NODE_MAX)
    iommu_group: int | None = Field(None, ge=0, le=IOMMU_GROUP_MAX)
    nvlink_domain: str | None = Field(None, max_length=NVLINK_DOMAIN_MAX)
    # The upstream port of the PCIe switch the GPU sits behind: GPUs behind one switch
    # talk peer to peer without crossing the root complex.
    pcie_switch: str | None = Field(None, max_length=12, pattern=PCI_ADDRESS_PATTERN)
    driver: str = Field("", max_length=DRIVER_MAX)
    health: Health = Health.HEALTHY
    health_message: str = Field("", max_length=MESSAGE_MAX)
    # When the agent last reset the GPU (function-level reset), by the node's clock:
    # informational, but for the record of an agent that predates last_reset_for.
    last_reset: datetime | None = None
    # The binder's status.releasedAt the agent saw when it made that reset, echoed back
    # verbatim: the binder ends Cleaning when it equals releasedAt, comparing no clocks.
    last_reset_for: datetime | None = None
    unschedulable: bool = False


class ObjectRef(Model):
    namespace: str = Field(max_length=NAMESPACE_MAX)
    name: str = Field(max_length=NAME_MAX)
    uid: str = Field("", max_length=UID_MAX)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Binding(Model):
    vm: ObjectRef
    bound_at: datetime
    reason: BindReason
    # For a set bound while its VM was stopped (moved, rebound or completed): when the VM
    # stopped, carried from the devices it replaces, so the reservation (releaseAfterStopped)
    # counts from the stop, not from this bind. Empty for a running VM's set.
    stopped_at: datetime | None = None


class Attachment(Model):
    vmi: ObjectRef
    since: datetime


class GPUDeviceStatus(Model):
    class_name: str = Field("", max_length=NAME_MAX)
    phase: Phase | None = None
    binding: Binding | None = None
    attachment: Attachment | None = None
    # When the device's last attachment ended, kept through a bind: a stopped VM's
    # reservation runs from here (a detach after its bind), and no attachment starts before.
    detached_at: datetime | None = None
    lost_since: datetime | None = None
    lost_reason: str = Field("", max_length=MESSAGE_MAX)
    released_at: datetime | None = None
    conditions: tuple[Condition, ...] = Field((), max_length=CONDITIONS_MAX)

    @computed_field(  # type: ignore[prop-decorator]
        description="The bound VM as namespace/name, for `kubectl get gpudevices`: "
        "binding.vm said once more, written with every status write",
        json_schema_extra={"maxLength": NAMESPACE_MAX + 1 + NAME_MAX},
    )
    @property
    def vm(self) -> str:
        # A printer column's JSONPath cannot join namespace and name; derived here, it is
        # never stale and costs no write of its own. Read from the API it is recomputed.
        return self.binding.vm.key if self.binding is not None else ""


class GPUDevice(Model):
    KIND: ClassVar[str] = "GPUDevice"
    PLURAL: ClassVar[str] = "gpudevices"
    NAMESPACED: ClassVar[bool] = False

    api_version: str = API_VERSION
    kind: str = "GPUDevice"
    metadata: ObjectMeta
    spec: GPUDeviceSpec
    status: GPUDeviceStatus = GPUDeviceStatus()

    @property
    def name(self) -> str:
        return self.metadata.name


def device_name(node: str, pci_address: str) -> str:
    """`<node>-<pci address with : and . as ->`, e.g. node-a-0000-3b-00-0."""
    return f"{node}-{pci_address.replace(':', '-').replace('.', '-')}"


# --- GPUBindRequest -------------------------------------------------------------------


class VMRef(Model):
    name: str = Field(min_length=1, max_length=NAME_MAX)
    uid: str = Field("", max_length=UID_MAX)


class NameRef(Model):
    name: str = Field(min_length=1, max_length=NAME_MAX)


class ClassCount(Model):
    class_name: str = Field(min_length=1, max_length=NAME_MAX)
    count: int = Field(ge=1, le=COUNT_MAX)
    # Other classes that may serve these GPUs instead (the VM's gpu.cozystack.io/classes),
    # all of them from one class.
    alternatives: tuple[Name, ...] | None = Field(None, max_length=32)


class GPUBindRequestSpec(Model):
    vm: VMRef
    vmi: NameRef
    requests: tuple[ClassCount, ...] = Field(min_length=1, max_length=32)


class RequestPhase(StrEnum):
    PENDING = "Pending"
    BOUND = "Bound"
    FAILED = "Failed"


class GPUBindRequestStatus(Model):
    phase: RequestPhase = RequestPhase.PENDING
    node_name: str = Field("", max_length=NAME_MAX)
    devices: tuple[Name, ...] = Field((), max_length=COUNT_MAX * 32)
    message: str = Field("", max_length=MESSAGE_MAX)
    answered_at: datetime | None = None


class GPUBindRequest(Model):
    KIND: ClassVar[str] = "GPUBindRequest"
    PLURAL: ClassVar[str] = "gpubindrequests"
    NAMESPACED: ClassVar[bool] = True

    api_version: str = API_VERSION
    kind: str = "GPUBindRequest"
    metadata: ObjectMeta
    spec: GPUBindRequestSpec
    status: GPUBindRequestStatus = GPUBindRequestStatus()


# --- GPUUsageRecord -------------------------------------------------------------------


class RecordKind(StrEnum):
    # A VMI used the device: one record per (VMI, device).
    ATTACHED = "Attached"
    # The device was bound to its VM with no VMI on it (a stopped VM's reservation, or
    # the moments between a bind and its VMI's start): it costs the provider as much.
    RESERVED = "Reserved"


class GPUUsageRecordSpec(Model):
    kind: RecordKind = RecordKind.ATTACHED
    # The tenant's namespace. Records live in the ledger namespace, where no tenant's
    # namespace deletion reaches them; empty on records written before the ledger moved
    # there (the binder moves those, see binder.ledger).
    namespace: str = Field("", max_length=63)
    vm: str = Field(min_length=1, max_length=NAME_MAX)
    vm_uid: str = Field("", max_length=UID_MAX)
    # The VMI of an Attached record.
    vmi: VMRef | None = None
    device: str = Field(min_length=1, max_length=NAME_MAX)
    class_name: str = Field("", max_length=NAME_MAX)
    node_name: str = Field("", max_length=NAME_MAX)
    start: datetime
    end: datetime | None = None


class GPUUsageRecord(Model):
    KIND: ClassVar[str] = "GPUUsageRecord"
    PLURAL: ClassVar[str] = "gpuusagerecords"
    NAMESPACED: ClassVar[bool] = True

    api_version: str = API_VERSION
    kind: str = "GPUUsageRecord"
    metadata: ObjectMeta
    spec: GPUUsageRecordSpec

    @property
    def tenant(self) -> str:
        """The namespace whose GPU time this is (a record from before the ledger moved
        lives in it and does not say so in its spec)."""
        return self.spec.namespace or self.metadata.namespace


# Every record carries its tenant's namespace as a label too, so a list selects one
# tenant's records server-side; a tenant's copy carries the ledger namespace it copies.
RECORD_NAMESPACE_LABEL = f"{GROUP}/namespace"
RECORD_COPY_LABEL = f"{GROUP}/copy-of"
# Records written before either label: a new leader lists these once and moves them
# into the ledger (binder.ledger.migration).
LEGACY_RECORDS = f"!{RECORD_NAMESPACE_LABEL}"

# Open records carry this label (value RECORD_OPEN); the write that closes one sets it to
# RECORD_CLOSED. The binder watches only OPEN_RECORDS: closed records are immutable and
# only the usage report reads them, so its cache does not grow with the ledger.
RECORD_STATE_LABEL = "gpu.cozystack.io/record-state"
RECORD_OPEN = "open"
RECORD_CLOSED = "closed"
OPEN_RECORDS = f"{RECORD_STATE_LABEL}={RECORD_OPEN}"
# The closed ones, which the GPU-seconds counters fold (kube.ledgerfold), never cached.
CLOSED_RECORDS = f"{RECORD_STATE_LABEL}={RECORD_CLOSED}"


def watched_record(record: GPUUsageRecord) -> bool:
    """Whether the binder's cache holds the record: open, and labelled so (OPEN_RECORDS)."""
    return record.spec.end is None and record.metadata.labels.get(RECORD_STATE_LABEL) == RECORD_OPEN


def is_copy(record: GPUUsageRecord) -> bool:
    """A tenant's copy of a record of the ledger (RECORD_COPY_LABEL), not the record."""
    return RECORD_COPY_LABEL in record.metadata.labels


def usage_record_name(vmi_uid: str, device: str) -> str:
    """Derived from the VMI uid and device, so opening a record twice is one record.

    A name past the API's 253 characters keeps its head and ends in a digest of the
    whole: cut short, two devices of one long node name would share one record.
    """
    return _bounded(f"{vmi_uid[:36]}-{device}")


def reserved_record_name(owner: str, device: str, start: datetime) -> str:
    """A Reserved record's name, derived from whom the device is bound to (the VM's uid,
    else its namespace/name), the device and when the interval began (to the
    microsecond), so opening it twice is one record and the next interval another."""
    who = (
        owner
        if len(owner) <= 36 and "/" not in owner
        else hashlib.sha256(owner.encode()).hexdigest()[:16]
    )
    stamp = start.astimezone(UTC).strftime("%Y%m%dt%H%M%S%f")
    return _bounded(f"{who}-{device}-r{stamp}")


def _bounded(name: str) -> str:
    if len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: NAME_MAX - len(digest) - 1]}-{digest}"
