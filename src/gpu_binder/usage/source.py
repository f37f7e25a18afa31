"""Reading the ledger from the API: GPUUsageRecords, page by page, into a Ledger.

Against a real API server the pages are read raw and each item is parsed on its own, so
one malformed record is reported and skipped instead of failing the whole list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from gpu_binder.api.kinds import resource_of
from gpu_binder.api.types import GPUUsageRecord, is_copy
from gpu_binder.client.errors import Gone
from gpu_binder.client.interface import Client
from gpu_binder.kube.client import KubeClient, path
from gpu_binder.usage.ledger import (
    Dimension,
    Entry,
    Kind,
    Ledger,
    Malformed,
    Period,
    Skipped,
    Summary,
    Where,
    entry_of,
)


@dataclass(frozen=True, slots=True)
class Reading:
    summary: Summary
    skipped: tuple[Skipped, ...]


async def read_ledger(
    client: Client,
    period: Period,
    by: Iterable[Dimension],
    now: datetime,
    *,
    where: Where | None = None,
    chunk_size: int | None = None,
    kind: Kind = "all",
) -> Reading:
    """The GPU time of the records `where` says, summed as they are read."""
    by = tuple(by)
    where = where or Where()
    limit = chunk_size
    while True:
        ledger, skipped = Ledger(period, by, now, kind), []
        try:
            async for item in _entries(client, where, limit):
                if isinstance(item, Skipped):
                    skipped.append(item)
                else:
                    ledger.add(item)
        except Gone:
            if limit == 0:
                raise
            # The continue token expired mid-list: one unpaged list is consistent.
            limit = 0
            continue
        return Reading(ledger.summary(), tuple(skipped))


async def read_entries(
    client: Client, where: Where, chunk_size: int | None = None
) -> tuple[list[Entry], list[Skipped]]:
    """Every record `where` says, as entries (an export needs each one)."""
    limit = chunk_size
    while True:
        entries: list[Entry] = []
        skipped: list[Skipped] = []
        try:
            async for item in _entries(client, where, limit):
                if isinstance(item, Skipped):
                    skipped.append(item)
                else:
                    entries.append(item)
        except Gone:
            if limit == 0:
                raise
            limit = 0
            continue
        return entries, skipped


async def _entries(
    client: Client, where: Where, limit: int | None
) -> AsyncIterator[Entry | Skipped]:
    if isinstance(client, KubeClient):
        async for raw in _raw_items(client, where, limit):
            yield parse_item(raw)
        return
    # Any other client (the in-memory one) hands out typed records, already parsed.
    listed = await client.list(GPUUsageRecord, where.listed or None, label_selector=where.selector)
    for record in listed.items:
        if not where.copies and is_copy(record):
            continue
        yield _entry(record)


async def _raw_items(client: KubeClient, where: Where, limit: int | None) -> AsyncIterator[Any]:
    url = path(resource_of(GPUUsageRecord), where.listed)
    query: dict[str, str] = {}
    if where.selector:
        query["labelSelector"] = where.selector
    if limit != 0:
        query["limit"] = str(limit or client.page_size)
    while True:
        page = await client.request("GET", url, query=query)
        for raw in page.get("items") or ():
            yield raw
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return
        query["continue"] = str(token)


def parse_item(raw: Any) -> Entry | Skipped:
    """One item of a list as the API server sent it: an Entry, or why it was skipped."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = f"{meta.get('namespace') or '?'}/{meta.get('name') or '?'}"
    try:
        record = GPUUsageRecord.model_validate(raw)
    except ValidationError as e:
        problems = [
            f"{'.'.join(str(part) for part in err['loc']) or 'the object'}: {err['msg']}"
            for err in e.errors()[:3]
        ]
        return Skipped(name, "; ".join(problems))
    return _entry(record)


def _entry(record: GPUUsageRecord) -> Entry | Skipped:
    try:
        return entry_of(record)
    except Malformed as e:
        meta = record.metadata
        return Skipped(f"{meta.namespace or '?'}/{meta.name}", str(e))
