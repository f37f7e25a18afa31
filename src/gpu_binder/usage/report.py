"""A Summary as text: a table for people, CSV for spreadsheets, JSON for machines."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from gpu_binder.usage.ledger import Group, Skipped, Summary

Format = Literal["table", "csv", "json"]
FORMATS: tuple[Format, ...] = ("table", "csv", "json")
# Keys are lower-case Kubernetes names, so an upper-case word can never be one of them.
TOTAL = "TOTAL"


def render(
    summary: Summary,
    fmt: Format,
    namespace: str | None = None,
    skipped: Sequence[Skipped] = (),
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The summary in a format; `extra` adds keys to the JSON (an export's watermark)."""
    if fmt == "json":
        return to_json(summary, namespace, skipped, extra)
    if fmt == "csv":
        return to_csv(summary)
    return to_table(summary, namespace)


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def minutes(g: Group) -> float:
    return g.gpu_seconds / 60


def hours(g: Group) -> float:
    return g.gpu_seconds / 3600


def _seconds(t: timedelta) -> float:
    return t / timedelta(seconds=1)


def _side_by_side(summary: Summary) -> bool:
    """Whether attached and reserved time get columns of their own (--kind all)."""
    return summary.kind == "all"


def _what(summary: Summary) -> str:
    return {"attached": "GPU use", "reserved": "GPUs reserved"}.get(summary.kind, "GPU usage")


def _classes_column(summary: Summary) -> bool:
    """Whether a group's classes need a column of their own: not when class is a key."""
    return "class" not in summary.by


def to_table(summary: Summary, namespace: str | None = None) -> str:
    scope = f"namespace {namespace}" if namespace else "all namespaces"
    title = (
        f"{_what(summary)} in [{rfc3339(summary.period.start)}, "
        f"{rfc3339(summary.period.end)}), {scope}, as of {rfc3339(summary.now)}"
    )
    keys = [d.upper() for d in summary.by]
    header = [*keys, *(["CLASSES"] if _classes_column(summary) else [])]
    numbers = ["RECORDS", "GPU-MINUTES", "GPU-HOURS"]
    if _side_by_side(summary):
        numbers[1:1] = ["ATTACHED-MIN", "RESERVED-MIN"]
    header += numbers
    rows = [_table_row(summary, g, [k or "-" for k in g.key]) for g in summary.groups]
    total = summary.total
    rows.append(_table_row(summary, total, [TOTAL] + [""] * (len(keys) - 1)))
    numeric = len(header) - len(numbers)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        out = [
            c.rjust(w) if i >= numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return "\n".join([title, line(header), *(line(r) for r in rows)]) + "\n"


def _table_row(summary: Summary, g: Group, keys: list[str]) -> list[str]:
    classes = [",".join(c or "-" for c in g.classes)] if _classes_column(summary) else []
    kinds = (
        [f"{_seconds(g.attached) / 60:,.2f}", f"{_seconds(g.reserved) / 60:,.2f}"]
        if _side_by_side(summary)
        else []
    )
    return [*keys, *classes, f"{g.records:,}", *kinds, f"{minutes(g):,.2f}", f"{hours(g):,.2f}"]


def _amount(seconds: float) -> dict[str, float]:
    # Seconds are exact to the microsecond; minutes and hours are rounded for reading.
    return {
        "gpu_seconds": round(seconds, 6),
        "gpu_minutes": round(seconds / 60, 4),
        "gpu_hours": round(seconds / 3600, 6),
    }


def _numbers(g: Group) -> dict[str, Any]:
    return {"records": g.records, **_amount(g.gpu_seconds)}


def _kinds(g: Group) -> dict[str, Any]:
    return {"attached": _amount(_seconds(g.attached)), "reserved": _amount(_seconds(g.reserved))}


def to_csv(summary: Summary) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    extra = ["classes"] if _classes_column(summary) else []
    side = _side_by_side(summary)
    kinds = ["attached_gpu_seconds", "reserved_gpu_seconds"] if side else []
    head = [*summary.by, *extra, "records", *kinds, "gpu_seconds", "gpu_minutes", "gpu_hours"]
    w.writerow(head)
    total = summary.total
    rows = [(list(g.key), g) for g in summary.groups]
    rows.append(([TOTAL] + [""] * (len(summary.by) - 1), total))
    for keys, g in rows:
        classes = [",".join(g.classes)] if extra else []
        n = _numbers(g)
        split = [round(_seconds(g.attached), 6), round(_seconds(g.reserved), 6)] if side else []
        w.writerow([*keys, *classes, n.pop("records"), *split, *n.values()])
    return buf.getvalue()


def to_json(
    summary: Summary,
    namespace: str | None = None,
    skipped: Sequence[Skipped] = (),
    extra: Mapping[str, Any] | None = None,
) -> str:
    side = _kinds if _side_by_side(summary) else (lambda g: {})
    doc: dict[str, Any] = {
        "from": rfc3339(summary.period.start),
        "to": rfc3339(summary.period.end),
        "as_of": rfc3339(summary.now),
        "namespace": namespace,
        "kind": summary.kind,
        "by": list(summary.by),
        "groups": [
            {
                **dict(zip(summary.by, g.key, strict=True)),
                "classes": list(g.classes),
                **_numbers(g),
                **side(g),
            }
            for g in summary.groups
        ],
        "total": {
            "classes": list(summary.total.classes),
            **_numbers(summary.total),
            **side(summary.total),
        },
        "skipped": [{"record": s.record, "reason": s.reason} for s in skipped],
    }
    doc.update(extra or {})
    return json.dumps(doc, indent=2) + "\n"
