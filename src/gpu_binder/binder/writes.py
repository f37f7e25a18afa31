"""The writes a step may stage, one type a verb: the Plan stages them (binder.plan), the
reconciler makes them by type (binder.writer), none decides anything when made.

Where a write's answer is something a step must remember — a usage record found closed
already (closed records are not cached), an orphan copy tried — the write carries the
step's rule for it (`on_exists`, `on_opened`, `on_tried`), and the reconciler only calls
it with what the API server answered.

VERB is the write's name in the gpu_binder_writes metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from gpu_binder.api.meta import Condition
from gpu_binder.api.types import GPUUsageRecord


@dataclass(frozen=True, slots=True)
class Status:
    """The object's status subresource, written whole: a device's, a bind request's
    answer, a class's."""

    obj: Any
    VERB: ClassVar[str] = "status"


@dataclass(frozen=True, slots=True)
class Update:
    """The object, written whole; of a GPUDevice only its finalizers (the agent owns the
    spec), as a patch."""

    obj: Any
    VERB: ClassVar[str] = "update"


@dataclass(frozen=True, slots=True)
class Create:
    """A new object; one that exists already is read as the API server holds it, and
    handed to on_exists when the step asked for it."""

    obj: Any
    on_exists: Callable[[Any], None] | None = field(default=None, compare=False)
    VERB: ClassVar[str] = "create"


@dataclass(frozen=True, slots=True)
class Apply:
    """A server-side apply of the KubeVirt CR; obj carries the body and the metadata the
    plan keys writes by."""

    obj: Any
    VERB: ClassVar[str] = "apply"


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One condition of a node's status, by a strategic merge patch of nodes/status."""

    node: str
    condition: Condition
    VERB: ClassVar[str] = "node_status"


@dataclass(frozen=True, slots=True)
class Delete:
    """The object deleted; deleted already is as good."""

    obj: Any
    VERB: ClassVar[str] = "delete"


@dataclass(frozen=True, slots=True)
class Finalizers:
    """A JSON merge patch of the object's metadata.finalizers (to those of obj), carrying
    obj's resourceVersion, for objects the binder does not own (a VMI)."""

    obj: Any
    VERB: ClassVar[str] = "finalizers"


@dataclass(frozen=True, slots=True)
class Annotations:
    """A JSON merge patch of the one annotation the binder keeps on a VM (the devices it
    holds, steps/tenantview.py), without a resourceVersion: it only reports."""

    obj: Any
    VERB: ClassVar[str] = "annotations"


@dataclass(frozen=True, slots=True)
class OpenRecord:
    """A Reserved usage record created with its copy (binder.ledgerwrites.open_record);
    the record as opened, or as found, is handed to on_opened."""

    obj: GPUUsageRecord
    on_opened: Callable[[GPUUsageRecord], None] | None = field(default=None, compare=False)
    VERB: ClassVar[str] = "open"


@dataclass(frozen=True, slots=True)
class WriteCopy:
    """A tenant's copy of a usage record, created or updated (binder.ledgerwrites)."""

    obj: GPUUsageRecord
    VERB: ClassVar[str] = "copy"


@dataclass(frozen=True, slots=True)
class SyncCopy:
    """An open copy written as its record in the ledger says now (binder.ledgerwrites);
    handed to on_tried once the write is tried, whatever its outcome."""

    obj: GPUUsageRecord
    on_tried: Callable[[GPUUsageRecord], None] | None = field(default=None, compare=False)
    VERB: ClassVar[str] = "sync-copy"


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer (obj, a GPUBindRequest with its status) to a request this process's own
    webhook handed its reconciler in memory (World.asked): no API write, since the request
    was never an object; made like any write, under the lease and after those it waits for,
    then told to the webhook (Reconciler.on_answer)."""

    obj: Any
    VERB: ClassVar[str] = "answer"


WriteOp: TypeAlias = (
    Status
    | Update
    | Create
    | Apply
    | NodeCondition
    | Delete
    | Finalizers
    | Annotations
    | OpenRecord
    | WriteCopy
    | SyncCopy
    | Answer
)


def target(op: WriteOp) -> Any:
    """The object a write writes (None for a node condition, which names only its node)."""
    return None if isinstance(op, NodeCondition) else op.obj
