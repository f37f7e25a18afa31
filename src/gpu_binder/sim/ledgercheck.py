"""Invariant 12: the ledger bills the GPU time the cluster really used, within a second
at each end of each interval, per namespace, class and kind (the issue-13 ground truth).

The truth is sim.truth's. The ledger is its records (tenants' copies left out), open ones
counted to now, as the GPU-seconds counters count them. Both are grouped by kind, device
and owner: a VMI's uid for Attached, the VM's namespace/name for Reserved. Within a
group, intervals that overlap or touch are merged. A GPU held without a break is one
interval, however many records bill it (that there is one record per interval is
invariant 6's business; this one judges seconds).

"Per interval" means each merged truth interval, with the ledger intervals of its group
that overlap it most. Its difference is the seconds billed that did not happen plus the
seconds that happened and were not billed: how far its start and its end are off, plus
any gap the ledger left inside it. A ledger interval that overlaps no truth interval of
its group differs by its whole length, and so does a truth interval the ledger missed.
Nothing of zero length counts, since it bills nothing.

The tolerance is 1 s everywhere, and the sim's time steps do not widen it. The clock
moves in ticks, and under --chaos also between KubeVirt's steps in the rounds it acts
before the binder (sim.cluster `race`); every write happens at the clock's instant, and
the truth's and the binder's now are that same instant (sim.truth). An end that came while
no binder ran is known to the binder that comes back only by stamps, and the other
machines' clocks (nodes, virt-controller) may be minutes off; but the API server stamped
the writes that matter by its own clock, to the second: a VMI's final phase
(managedFields, VirtualMachineInstance.finish) and its launcher pod's binding
(PodScheduled). So those ends are held to a second too, as is every gap and every
invented or missed interval.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

from gpu_binder.api.meta import utc
from gpu_binder.api.types import GPUUsageRecord, RecordKind, is_copy
from gpu_binder.sim.truth import Stretch

TOLERANCE = 1.0
Span = tuple[datetime, datetime]
Group = tuple[RecordKind, str, str]
LISTED = 20


@dataclass
class LedgerCheck:
    """The figures of one comparison: seconds per kind, the worst interval and the
    intervals beyond the tolerance (as violations of invariant 12)."""

    truth_seconds: dict[str, float] = field(default_factory=dict)
    ledger_seconds: dict[str, float] = field(default_factory=dict)
    intervals: int = 0
    worst_seconds: float = 0.0
    worst_namespace_class_seconds: float = 0.0
    violations: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "truth_gpu_seconds": {k: round(v, 3) for k, v in sorted(self.truth_seconds.items())},
            "ledger_gpu_seconds": {k: round(v, 3) for k, v in sorted(self.ledger_seconds.items())},
            "intervals": self.intervals,
            "worst_interval_seconds": round(self.worst_seconds, 3),
            "worst_namespace_class_seconds": round(self.worst_namespace_class_seconds, 3),
            "beyond_tolerance": len(self.violations),
        }


def compare(
    truth: Iterable[Stretch],
    records: Iterable[GPUUsageRecord],
    now: datetime,
) -> LedgerCheck:
    """The ledger's records against the truth's intervals, as of now."""
    now = utc(now)
    out = LedgerCheck()
    for kind in RecordKind:
        out.truth_seconds[kind.lower()] = 0.0
        out.ledger_seconds[kind.lower()] = 0.0
    true_spans: dict[Group, list[Span]] = defaultdict(list)
    billed: dict[Group, list[Span]] = defaultdict(list)
    totals: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    where: dict[Group, str] = {}
    for s in truth:
        span = (utc(s.start), utc(s.end) if s.end is not None else now)
        seconds = _length(span)
        out.truth_seconds[s.kind.lower()] += seconds
        totals[(s.namespace, s.class_name, s.kind.lower())][0] += seconds
        group = (s.kind, s.device, s.owner)
        true_spans[group].append(span)
        where[group] = s.namespace
    for r in records:
        if is_copy(r):
            continue
        spec = r.spec
        span = (utc(spec.start), utc(spec.end) if spec.end is not None else now)
        seconds = _length(span)
        out.ledger_seconds[spec.kind.lower()] += seconds
        totals[(r.tenant, spec.class_name, spec.kind.lower())][1] += seconds
        owner = spec.vmi.uid if spec.vmi is not None else f"{r.tenant}/{spec.vm}"
        group = (spec.kind, spec.device, owner)
        billed[group].append(span)
        where.setdefault(group, r.tenant)
    for group in sorted(set(true_spans) | set(billed)):
        for diff, t, ls in _judge(_merged(true_spans[group]), _merged(billed[group])):
            out.intervals += 1
            out.worst_seconds = max(out.worst_seconds, diff)
            if not _within(t, ls):
                out.violations.append(_violation(group, where[group], diff, t, ls))
    out.worst_namespace_class_seconds = max((abs(a - b) for a, b in totals.values()), default=0.0)
    return out


def _judge(truth: list[Span], ledger: list[Span]) -> list[tuple[float, Span | None, list[Span]]]:
    """Each truth interval with the ledger intervals overlapping it most, and the ledger
    intervals overlapping none: (difference in seconds, truth, ledger)."""
    mine: dict[int, list[Span]] = defaultdict(list)
    strays: list[Span] = []
    for span in ledger:
        best = max(range(len(truth)), key=lambda i: _overlap(truth[i], span), default=None)
        if best is None or _overlap(truth[best], span) <= 0:
            strays.append(span)
        else:
            mine[best].append(span)
    out: list[tuple[float, Span | None, list[Span]]] = []
    for i, t in enumerate(truth):
        ls = mine.get(i, [])
        common = sum(_overlap(t, span) for span in ls)
        out.append((_length(t) + sum(_length(s) for s in ls) - 2 * common, t, ls))
    out.extend((_length(s), None, [s]) for s in strays)
    return out


def _within(t: Span | None, ls: list[Span]) -> bool:
    """Whether the ledger's intervals bill the truth's within the tolerance: each end off
    by at most 1 s, no more than 1 s of gaps."""
    if t is None:
        return sum(_length(s) for s in ls) <= TOLERANCE
    if not ls:
        # Missed: as if billed for none of it at an instant inside it, each end a second off.
        return _length(t) <= 2 * TOLERANCE
    start, end = ls[0][0], ls[-1][1]
    gaps = sum((b[0] - a[1]).total_seconds() for a, b in pairwise(ls))
    return (
        abs((start - t[0]).total_seconds()) <= TOLERANCE
        and abs((end - t[1]).total_seconds()) <= TOLERANCE
        and gaps <= TOLERANCE
    )


def _merged(spans: list[Span]) -> list[Span]:
    """The spans of positive length, those that overlap or touch made one."""
    out: list[Span] = []
    for t in sorted(s for s in spans if _length(s) > 0):
        if out and t[0] <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], t[1]))
        else:
            out.append(t)
    return out


def _length(span: Span) -> float:
    return max(0.0, (span[1] - span[0]).total_seconds())


def _overlap(a: Span, b: Span) -> float:
    return max(0.0, (min(a[1], b[1]) - max(a[0], b[0])).total_seconds())


def _violation(group: Group, namespace: str, diff: float, t: Span | None, ls: list[Span]) -> str:
    kind, device, owner = group
    whose = f"VMI {namespace} {owner[:8]}" if kind == RecordKind.ATTACHED else f"VM {owner}"
    truth = _show(t) if t is not None else "nothing"
    billed = ", ".join(_show(s) for s in ls) or "nothing"
    return (
        f"(12) {kind} time of {device} for {whose}: truth {truth}, ledger {billed}: {diff:.1f}s off"
    )


def _show(span: Span) -> str:
    return f"[{span[0].isoformat()}, {span[1].isoformat()})"
