"""What a CustomResourceDefinition adds to its model: names, printer columns (the columns
of `kubectl get`), subresources and CEL validation rules, and these for gpu-binder's kinds.

The schema itself comes from the model (:mod:`gpu_binder.api.crdschema`); the CRDs are
assembled and written by :mod:`gpu_binder.api.crds`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from gpu_binder.api.meta import Model
from gpu_binder.api.types import (
    GROUP,
    NAME_MAX,
    PCI_ADDRESS_PATTERN,
    RESERVATION_MAX,
    RESERVED_RESOURCE_PREFIXES,
    RESOURCE_NAME_MAX,
    RESOURCE_NAME_PATTERN,
    GPUBindRequest,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
)


@dataclass(frozen=True)
class Rule:
    """One x-kubernetes-validations entry: a CEL rule and what a user is told when it fails."""

    rule: str
    message: str
    # Points the error at a child field, so the user sees which field to fix.
    field_path: str | None = None
    # FieldValueInvalid when unset; Required/Forbidden read better where they fit (the API
    # server drops the message of a Duplicate, so that reason is not used).
    reason: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class Column:
    """One additionalPrinterColumns entry, the columns of `kubectl get`."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    # 1 shows the column only under `kubectl get -o wide`.
    priority: int = 0
    format: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.format:
            out["format"] = self.format
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


AGE = Column("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class KindSpec:
    """What a CRD adds to a model: names, columns, subresources and CEL rules."""

    model: type[Model]
    short_name: str
    description: str
    status_subresource: bool
    columns: tuple[Column, ...]
    # Schema path (property names, "[]" for an array's items) -> rules on that node.
    rules: Mapping[tuple[str, ...], tuple[Rule, ...]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return str(self.model.KIND)  # type: ignore[attr-defined]

    @property
    def plural(self) -> str:
        return str(self.model.PLURAL)  # type: ignore[attr-defined]

    @property
    def namespaced(self) -> bool:
        return bool(self.model.NAMESPACED)  # type: ignore[attr-defined]

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


def _cel_string(text: str) -> str:
    """A CEL string literal of text: CEL reads backslash escapes, so they are doubled."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _go_duration(t: timedelta) -> str:
    """A whole number of hours in Go's form, which CEL's duration() reads."""
    assert t.total_seconds() % 3600 == 0
    return f"{int(t.total_seconds()) // 3600}h"


_RESERVED = " && ".join(f"!self.startsWith({_cel_string(p)})" for p in RESERVED_RESOURCE_PREFIXES)
# The resource name rules are CEL rather than a schema pattern: the API server's pattern
# error quotes the regular expression, these say what a resource name is.
_RESOURCE_NAME_RULES = (
    Rule(
        f"self.matches({_cel_string(RESOURCE_NAME_PATTERN)}) && self.indexOf('/') <= {NAME_MAX}",
        "resourceName must be an extended resource name <domain>/<name> (a DNS subdomain of "
        f"at most {NAME_MAX} characters, a name of at most 63), such as "
        "nvidia.com/GH100_H100_SXM5_80GB",
    ),
    Rule(
        _RESERVED,
        "resourceName must not be in "
        + " or ".join(RESERVED_RESOURCE_PREFIXES)
        + f": {RESERVED_RESOURCE_PREFIXES[0]}* is the slot space the node agent serves one "
        "GPU per name in, and devices.kubevirt.io/* is KubeVirt's own",
        reason="FieldValueForbidden",
    ),
    Rule(
        "!(self.startsWith('kubernetes.io/') || "
        "self.substring(0, self.indexOf('/')).endsWith('.kubernetes.io'))",
        "resourceName must not be in the kubernetes.io domain: those are not extended resources",
        reason="FieldValueForbidden",
    ),
)


KINDS: tuple[KindSpec, ...] = (
    KindSpec(
        model=GPUClass,
        short_name="gpuc",
        description="A kind of GPU tenants can order, named by the KubeVirt device name "
        "VMs use (spec.resourceName).",
        status_subresource=True,
        # What an operator asks first: how many of the class are free, and the largest
        # order that fits now (under the class's topology, as placement would pick it).
        columns=(
            Column("Resource", ".spec.resourceName"),
            Column("Devices", ".status.devices", "integer"),
            Column("Available", ".status.available", "integer"),
            Column("Bound", ".status.bound", "integer"),
            Column("Attached", ".status.attached", "integer"),
            Column("Lost", ".status.lost", "integer"),
            Column("Cleaning", ".status.cleaning", "integer"),
            Column(
                "Largest Free Set",
                ".status.largestFreeSet",
                "integer",
                "The largest order that can be bound right now",
            ),
            Column("Policy", ".spec.placement.policy", priority=1),
            Column("Topology", ".spec.placement.topology", priority=1),
            Column("Pinning", ".spec.pinning", priority=1),
            Column("Release After Stop", ".spec.reservation.releaseAfterStopped", priority=1),
            AGE,
        ),
        rules={
            ("spec",): (
                Rule(
                    "has(self.resourceName) && self.resourceName.size() > 0",
                    "resourceName is required: the KubeVirt device name VMs order this class "
                    "by, such as nvidia.com/GH100_H100_SXM5_80GB",
                    field_path=".resourceName",
                    reason="FieldValueRequired",
                ),
            ),
            ("spec", "resourceName"): _RESOURCE_NAME_RULES,
            ("spec", "match", "deviceIDs"): (
                Rule(
                    "self.all(id, self.exists_one(other, other == id))",
                    "deviceIDs must not list the same device ID twice",
                ),
            ),
            ("spec", "match", "nodeSelector"): (
                Rule(
                    f"self.all(k, k.size() <= {RESOURCE_NAME_MAX})",
                    f"nodeSelector keys are label keys of at most {RESOURCE_NAME_MAX} characters",
                ),
            ),
            ("spec", "reservation", "releaseAfterStopped"): (
                Rule(
                    f"duration(self) <= duration('{_go_duration(RESERVATION_MAX)}')",
                    f"releaseAfterStopped must be at most {_go_duration(RESERVATION_MAX)} "
                    "(ten years); leave it out to keep a stopped VM's GPUs while the VM exists",
                ),
            ),
        },
    ),
    KindSpec(
        model=GPUDevice,
        short_name="gpud",
        description="One physical GPU on a node: its hardware (spec, written by the node "
        "agent) and its binding to a VM (status, written by the binder).",
        status_subresource=True,
        columns=(
            Column("Node", ".spec.nodeName"),
            Column("Class", ".status.className"),
            Column("Phase", ".status.phase"),
            Column("VM", ".status.vm", description="The bound VM, namespace/name"),
            Column("Health", ".spec.health"),
            Column("Slot", ".spec.slot", "integer", priority=1),
            Column("PCI", ".spec.pciAddress", priority=1),
            Column("Model", ".spec.model", priority=1),
            Column("Driver", ".spec.driver", priority=1),
            Column("Message", ".spec.healthMessage", priority=1),
            AGE,
        ),
        rules={
            ("spec", "pciAddress"): (
                Rule(
                    f"self.matches({_cel_string(PCI_ADDRESS_PATTERN)})",
                    "pciAddress must be a PCI address domain:bus:device.function in "
                    "lower-case hex, such as 0000:3b:00.0",
                ),
            ),
            ("spec", "nodeName"): (
                Rule(
                    "self == oldSelf",
                    "nodeName is immutable: a GPU does not move between nodes; delete the "
                    "GPUDevice and let the node agent create it on its new node",
                    reason="FieldValueForbidden",
                ),
            ),
        },
    ),
    KindSpec(
        model=GPUBindRequest,
        short_name="gpubr",
        description="The webhook asks for a VM's GPUs to be bound; the binder answers in status.",
        status_subresource=True,
        # A tenant's question: is my start waiting, bound where, or refused and why.
        columns=(
            Column("VM", ".spec.vm.name"),
            Column("VMI", ".spec.vmi.name", priority=1),
            Column("Class", ".spec.requests[0].className", priority=1),
            Column("Count", ".spec.requests[0].count", "integer", priority=1),
            Column("Phase", ".status.phase"),
            Column("Node", ".status.nodeName"),
            Column("Message", ".status.message"),
            AGE,
        ),
        rules={
            ("spec", "requests", "[]", "count"): (
                Rule("self > 0", "count must be at least 1: a request orders one GPU or more"),
            ),
        },
    ),
    KindSpec(
        model=GPUUsageRecord,
        short_name="gpuur",
        description="The billing ledger: one interval of one GPU, attached to a VMI (kind "
        "Attached) or bound to a VM with no VMI on it (kind Reserved); open while end is "
        "empty, immutable once closed. Records live in the ledger namespace; a tenant's "
        "namespace holds copies of its own.",
        status_subresource=False,
        # A tenant's bill, line by line: which VM held which GPU, where, from when to when
        # (End empty: still open).
        columns=(
            Column("Kind", ".spec.kind"),
            Column("Tenant", ".spec.namespace"),
            Column("VM", ".spec.vm"),
            Column("Class", ".spec.className"),
            Column("Node", ".spec.nodeName"),
            Column("Device", ".spec.device"),
            Column("Start", ".spec.start", format="date-time"),
            Column("End", ".spec.end", format="date-time"),
            Column("VMI", ".spec.vmi.name", priority=1),
        ),
        rules={
            ("spec",): (
                Rule(
                    "!has(oldSelf.end) || self == oldSelf",
                    "a closed usage record is immutable",
                    reason="FieldValueForbidden",
                ),
                Rule(
                    "!has(self.end) || self.end >= self.start",
                    "end must not be before start",
                    field_path=".end",
                ),
                # What an open record bills from is fixed when it opens: only its end is
                # ever written (the binder closes it).
                Rule(
                    "self.start == oldSelf.start",
                    "start is immutable: a usage record bills from when it was opened",
                    field_path=".start",
                    reason="FieldValueForbidden",
                ),
                Rule(
                    "self.kind != 'Attached' || has(self.vmi)",
                    "an Attached record names the VMI that used the GPU",
                    field_path=".vmi",
                    reason="FieldValueRequired",
                ),
            ),
        },
    ),
)
