"""Invariant 11 of DESIGN §2: no two usage records of one device overlap, and none ends
after the binder's now (the sim's virtual clock; the times other machines report may be
ahead of it, and a record must not take them as they are).

Each record is judged when it is written, against the other records of its device
(a device has a handful over a run, so that is cheap): an open record reaches to the end
of time, and records that only touch (one ends when the next starts) do not overlap.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpu_binder.api.meta import utc
from gpu_binder.api.types import GPUUsageRecord, is_copy
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.memory import MemoryClient

Span = tuple[datetime, datetime | None]


class RecordChecker:
    def __init__(self, client: MemoryClient, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self._spans: dict[str, dict[str, Span]] = defaultdict(dict)
        self._pending: list[str] = []
        self._reported: set[tuple[str, str]] = set()
        # When each record was seen closed (the binder's now at its close).
        self.closed_at: dict[str, datetime] = {}
        for r in client.objects(GPUUsageRecord):
            if not is_copy(r):
                self._spans[_device(r)][_key(r)] = _span(r)
        client.subscribe(self._on_event)

    def check(self) -> list[str]:
        out, self._pending = self._pending, []
        return out

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is not GPUUsageRecord or event.type == "DELETED" or is_copy(event.object):
            return
        r: GPUUsageRecord = event.object
        key, span = _key(r), _span(r)
        spans = self._spans[_device(r)]
        before = spans.get(key)
        spans[key] = span
        if before == span:
            return
        now = utc(self.clock())
        if span[1] is not None and (before is None or before[1] is None):
            self.closed_at[key] = now
            if span[1] > now:
                self._pending.append(
                    f"(11) usage record {key} of {r.spec.device} ends at {span[1].isoformat()}, "
                    f"after the binder's now {now.isoformat()}"
                )
        for other, theirs in spans.items():
            if other == key or not _overlap(span, theirs):
                continue
            pair = (min(key, other), max(key, other))
            if pair in self._reported:
                continue
            self._reported.add(pair)
            self._pending.append(
                f"(11) usage records {pair[0]} {_show(spans[pair[0]])} and {pair[1]} "
                f"{_show(spans[pair[1]])} of {r.spec.device} overlap"
            )


def _device(r: GPUUsageRecord) -> str:
    """Records are judged against the ledger's others of their device and kind: a tenant's
    copy repeats a record (binder.ledger), and Attached and Reserved intervals are billed
    apart."""
    return f"{r.spec.device} {r.spec.kind}"


def _key(r: GPUUsageRecord) -> str:
    return f"{r.metadata.namespace}/{r.metadata.name}"


def _span(r: GPUUsageRecord) -> Span:
    return utc(r.spec.start), utc(r.spec.end) if r.spec.end is not None else None


def _overlap(a: Span, b: Span) -> bool:
    if _empty(a) or _empty(b):
        return False  # no second is billed by a record that ends where it starts
    a_end_after_b_start = a[1] is None or a[1] > b[0]
    b_end_after_a_start = b[1] is None or b[1] > a[0]
    return a_end_after_b_start and b_end_after_a_start


def _empty(span: Span) -> bool:
    return span[1] is not None and span[1] <= span[0]


def _show(span: Span) -> str:
    end = span[1].isoformat() if span[1] is not None else "open"
    return f"[{span[0].isoformat()}, {end})"
