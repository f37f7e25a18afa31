"""Where the ledger lives, and the records as the binder writes them (README "Billing").

Every usage record lives in the ledger namespace (Config.ledger_namespace, by default
`gpu-binder-ledger`), which holds nothing else and which no tenant can write or delete
in: deleting a VM, a VMI or a tenant's whole namespace deletes no record. A tenant reads
its own through a copy in its namespace, same name and spec, labelled `copy-of`; its
read-only role (gpu-binder-tenant) reads it there, and a namespace deletion takes the
copies with it, which is the tenant's own view going, not the ledger. Only the binder
writes records and copies; nobody is granted delete on either (retention is the
operator's, see README).

Why not the other homes: a cluster-scoped kind cannot be granted to a tenant for its own
objects only (RBAC scopes by namespace, not by field), so tenants would need a service
to read through; a finalizer holding a namespace's records until the binder had copied
them would hang every namespace deletion once gpu-binder is uninstalled.

A step stages the record's write and its copy's (`stage`); the reconciler makes them, a
copy as a WriteCopy, which a namespace that is gone or going refuses harmlessly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    RECORD_CLOSED,
    RECORD_COPY_LABEL,
    RECORD_NAMESPACE_LABEL,
    RECORD_OPEN,
    RECORD_STATE_LABEL,
    GPUDevice,
    GPUUsageRecord,
    GPUUsageRecordSpec,
    RecordKind,
    VMRef,
    is_copy,
    reserved_record_name,
    usage_record_name,
    watched_record,
)
from gpu_binder.binder.intervals import Reservation
from gpu_binder.binder.plan import Plan
from gpu_binder.binder.writes import Create, Update, WriteCopy

RECORD_LABEL_VM = "gpu.cozystack.io/vm"


def of_ledger(
    records: Iterable[GPUUsageRecord], kind: RecordKind | None = RecordKind.ATTACHED
) -> list[GPUUsageRecord]:
    """The records of the ledger among these (the tenants' copies left out), of one kind
    (None: both)."""
    return [r for r in records if not is_copy(r) and (kind is None or r.spec.kind == kind)]


def labels_of(spec: GPUUsageRecordSpec) -> dict[str, str]:
    """The labels of a record of this spec: its VM, its tenant, and open or closed."""
    state = RECORD_OPEN if spec.end is None else RECORD_CLOSED
    return {
        RECORD_LABEL_VM: spec.vm,
        RECORD_NAMESPACE_LABEL: spec.namespace,
        RECORD_STATE_LABEL: state,
    }


def record(ledger: str, name: str, spec: GPUUsageRecordSpec) -> GPUUsageRecord:
    """The record of the ledger of this name and spec."""
    meta = ObjectMeta(name=name, namespace=ledger, labels=labels_of(spec))
    return GPUUsageRecord(metadata=meta, spec=spec)


def attached(d: GPUDevice, ledger: str) -> GPUUsageRecord:
    """The record a device's attachment opens: one per (VMI, device)."""
    att, binding = d.status.attachment, d.status.binding
    assert att is not None
    spec = GPUUsageRecordSpec(
        kind=RecordKind.ATTACHED,
        namespace=att.vmi.namespace,
        vm=binding.vm.name if binding is not None else att.vmi.name,
        vm_uid=binding.vm.uid if binding is not None else "",
        vmi=VMRef(name=att.vmi.name, uid=att.vmi.uid),
        device=d.metadata.name,
        class_name=d.status.class_name,
        node_name=d.spec.node_name,
        start=att.since,
    )
    return record(ledger, usage_record_name(att.vmi.uid, d.metadata.name), spec)


def reserved(d: GPUDevice, r: Reservation, ledger: str) -> GPUUsageRecord:
    """The record a device's reservation opens: one per interval it is bound unattached."""
    vm = r.binding.vm
    spec = GPUUsageRecordSpec(
        kind=RecordKind.RESERVED,
        namespace=vm.namespace,
        vm=vm.name,
        vm_uid=vm.uid,
        device=d.metadata.name,
        class_name=d.status.class_name,
        node_name=d.spec.node_name,
        start=r.start,
    )
    return record(ledger, reserved_record_name(r.owner, d.metadata.name, r.start), spec)


def closed(rec: GPUUsageRecord, end: datetime) -> GPUUsageRecord:
    """The record closed at end; closed, it leaves the binder's selection (OPEN_RECORDS)
    in the same write."""
    spec = rec.spec.model_copy(update={"end": end})
    labels = {**rec.metadata.labels, RECORD_STATE_LABEL: RECORD_CLOSED}
    meta = rec.metadata.model_copy(update={"labels": labels})
    return rec.model_copy(update={"metadata": meta, "spec": spec})


def copy_of(
    rec: GPUUsageRecord, ledger: str, current: GPUUsageRecord | None
) -> GPUUsageRecord | None:
    """The tenant's copy of a record of the ledger, to write over `current` (the copy as
    the binder holds it, for its resourceVersion); None when the tenant's namespace is
    the ledger's own, which holds the record itself."""
    tenant = rec.tenant
    if tenant == ledger:
        return None
    labels = {**rec.metadata.labels, RECORD_NAMESPACE_LABEL: tenant, RECORD_COPY_LABEL: ledger}
    rv = current.metadata.resource_version if current is not None else ""
    meta = ObjectMeta(name=rec.metadata.name, namespace=tenant, labels=labels, resource_version=rv)
    return GPUUsageRecord(metadata=meta, spec=rec.spec)


def same(a: GPUUsageRecord, b: GPUUsageRecord) -> bool:
    """Whether two records say the same (a copy and its record)."""
    return a.spec == b.spec and a.metadata.labels.get(RECORD_STATE_LABEL) == b.metadata.labels.get(
        RECORD_STATE_LABEL
    )


def stage(plan: Plan, op: Create | Update, ledger: str, copy: GPUUsageRecord | None) -> None:
    """Stage a record's write, then its copy's (after it: a copy never says more than the
    ledger)."""
    plan.write(op)
    new = copy_of(op.obj, ledger, copy)
    if new is not None:
        plan.write(WriteCopy(new))


def remember_closed(
    closed: dict[tuple[str, str], tuple[str, str]],
) -> Callable[[GPUUsageRecord], None]:
    """What to do with a record the API server holds already, or opened closed: closed
    records are not cached, so one found closed is remembered by (device, kind), and its
    interval is never opened again (steps.records, steps.reserved)."""

    def found(rec: GPUUsageRecord) -> None:
        if not watched_record(rec):
            closed[(rec.spec.device, rec.spec.kind)] = (rec.metadata.namespace, rec.metadata.name)

    return found


def keep_copy(
    plan: Plan, copies: Mapping[str, GPUUsageRecord], rec: GPUUsageRecord, ledger: str
) -> None:
    """Write an open record's copy again when the tenant's namespace lacks it or it says
    otherwise (a copy write that failed, or a record from before the ledger moved). A
    namespace deletion that took the copy is no change the step is given: it tries again
    only on a new leader's first pass, which the namespace refuses harmlessly."""
    copy = copies.get(rec.metadata.name)
    if copy is not None and same(copy, rec):
        return
    new = copy_of(rec, ledger, copy)
    if new is not None:
        plan.write(WriteCopy(new))


def migration(
    legacy: Iterable[GPUUsageRecord], ledger: str, on_exists: Callable[[GPUUsageRecord], None]
) -> list[Create | Update]:
    """The writes that move records from before the ledger (in their tenant's namespace,
    without the namespace label) into it: each gets its record in the ledger, open or
    closed as it is, and becomes the tenant's copy (a label change, which a closed
    record allows). The record first: a crash between the two leaves a legacy record the
    next leader moves again, whose ledger record then exists already."""
    out: list[Create | Update] = []
    for old in legacy:
        if RECORD_COPY_LABEL in old.metadata.labels:
            continue
        tenant = old.metadata.namespace
        labels = {**old.metadata.labels, **labels_of(old.spec), RECORD_NAMESPACE_LABEL: tenant}
        if tenant != ledger:
            spec = old.spec.model_copy(update={"namespace": tenant})
            out.append(Create(record(ledger, old.metadata.name, spec), on_exists))
            labels[RECORD_COPY_LABEL] = ledger
        # Labels only: a closed record's spec is immutable (tenant reads it from where it is).
        meta = old.metadata.model_copy(update={"labels": labels})
        out.append(Update(old.model_copy(update={"metadata": meta})))
    return out
