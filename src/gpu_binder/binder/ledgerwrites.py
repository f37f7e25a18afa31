"""The reconciler's writes of the ledger (binder.ledger) that need more than one request:
the I/O behind OpenRecord (a Reserved record and its copy), WriteCopy and SyncCopy.

A copy is the tenant's view, never the ledger: a namespace that is gone, or going (the
API server refuses creates in a terminating namespace), takes none, and that is no error
of the pass. Any other failure is, and the pass retries it like every write.
"""

from __future__ import annotations

from gpu_binder.api.types import RECORD_COPY_LABEL, GPUUsageRecord
from gpu_binder.binder import ledger
from gpu_binder.client.errors import AlreadyExists, ApiError, Conflict, Forbidden, NotFound
from gpu_binder.client.interface import Client


def namespace_going(error: ApiError) -> bool:
    """The API server's refusal to create in a namespace being deleted (its message, as
    pkg/admission/plugin/namespace/lifecycle words it: "... because it is being
    terminated")."""
    return isinstance(error, Forbidden) and "being terminated" in error.message


async def write_copy(client: Client, copy: GPUUsageRecord) -> GPUUsageRecord | None:
    """Create the copy, or bring the one there in line; None when the tenant's
    namespace takes no copy (gone or going)."""
    try:
        if copy.metadata.resource_version:
            try:
                return await client.update(copy)
            except (Conflict, NotFound):
                pass  # changed or gone since the binder saw it: as if it were new
            copy = _without_rv(copy)
        return await client.create(copy)
    except AlreadyExists:
        pass
    except NotFound:
        return None  # the namespace is gone
    except Forbidden as e:
        if namespace_going(e):
            return None
        raise
    meta = copy.metadata
    try:
        found = await client.get(GPUUsageRecord, meta.name, meta.namespace)
    except NotFound:
        return None
    if ledger.same(found, copy) or found.spec.end is not None:
        return found  # a closed copy is immutable, as its record is
    rv = found.metadata.resource_version
    return await client.update(
        copy.model_copy(update={"metadata": meta.model_copy(update={"resource_version": rv})})
    )


async def sync_copy(client: Client, copy: GPUUsageRecord) -> GPUUsageRecord | None:
    """Write an open copy whose record is no longer open as the record says now (the
    record of the ledger its copy-of label names). None when there is nothing to write:
    the record is still open (the binder's cache lags) or gone (an operator pruned it)."""
    meta = copy.metadata
    book = meta.labels.get(RECORD_COPY_LABEL, "")
    try:
        rec = await client.get(GPUUsageRecord, meta.name, book)
    except NotFound:
        return None
    if rec.spec.end is None:
        return None
    new = ledger.copy_of(rec, book, copy)
    if new is None:
        return None
    return await write_copy(client, new)


def _without_rv(copy: GPUUsageRecord) -> GPUUsageRecord:
    return copy.model_copy(
        update={"metadata": copy.metadata.model_copy(update={"resource_version": ""})}
    )


# Names tried for one interval at most: each is a closed interval of no length that began
# at the same instant, which only a clock that stands still (a simulation) makes many of.
SEQUENCE_MAX = 64


async def open_record(
    client: Client, rec: GPUUsageRecord
) -> tuple[GPUUsageRecord, GPUUsageRecord | None]:
    """Create a Reserved record and its copy; (the record, the copy or None).

    Its name is derived from its owner, device and start (api.types.reserved_record_name).
    Found closed with no length, that name was an earlier interval's that began at the
    same instant (a VMI that ran for no time): the next name of its sequence is taken.
    Found closed with a length, it is this interval, closed already: it is not opened
    again, as an Attached record is not."""
    base = rec.metadata.name
    book = rec.metadata.namespace
    for n in range(1, SEQUENCE_MAX + 1):
        name = base if n == 1 else f"{base}-{n}"
        meta = rec.metadata.model_copy(update={"name": name})
        try:
            created = await client.create(rec.model_copy(update={"metadata": meta}))
        except AlreadyExists:
            found = await client.get(GPUUsageRecord, name, book)
            end = found.spec.end
            if end is None or end > found.spec.start or found.spec.start != rec.spec.start:
                return found, None
            continue
        copy = ledger.copy_of(created, book, None)
        return created, (await write_copy(client, copy) if copy is not None else None)
    raise ApiError(f"usage record {base}: {SEQUENCE_MAX} intervals began at {rec.spec.start}")
