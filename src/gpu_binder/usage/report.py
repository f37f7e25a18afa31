"""A Summary as text: a table for people, CSV for spreadsheets, JSON for machines."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
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
) -> str:
    if fmt == "json":
        return to_json(summary, namespace, skipped)
    if fmt == "csv":
        return to_csv(summary)
    return to_table(summary, namespace)


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def minutes(g: Group) -> float:
    return g.gpu_seconds / 60


def hours(g: Group) -> float:
    return g.gpu_seconds / 3600


def _classes_column(summary: Summary) -> bool:
    """Whether a group's classes need a column of their own: not when class is a key."""
    return "class" not in summary.by


def to_table(summary: Summary, namespace: str | None = None) -> str:
    scope = f"namespace {namespace}" if namespace else "all namespaces"
    title = (
        f"GPU usage in [{rfc3339(summary.period.start)}, {rfc3339(summary.period.end)}), "
        f"{scope}, as of {rfc3339(summary.now)}"
    )
    keys = [d.upper() for d in summary.by]
    header = [*keys, *(["CLASSES"] if _classes_column(summary) else [])]
    header += ["RECORDS", "GPU-MINUTES", "GPU-HOURS"]
    rows = [_table_row(summary, g, [k or "-" for k in g.key]) for g in summary.groups]
    total = summary.total
    rows.append(_table_row(summary, total, [TOTAL] + [""] * (len(keys) - 1)))
    numeric = len(header) - 3
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
    return [*keys, *classes, f"{g.records:,}", f"{minutes(g):,.2f}", f"{hours(g):,.2f}"]


def _numbers(g: Group) -> dict[str, Any]:
    # Seconds are exact to the microsecond; minutes and hours are rounded for reading.
    return {
        "records": g.records,
        "gpu_seconds": round(g.gpu_seconds, 6),
        "gpu_minutes": round(minutes(g), 4),
        "gpu_hours": round(hours(g), 6),
    }


def to_csv(summary: Summary) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    extra = ["classes"] if _classes_column(summary) else []
    w.writerow([*summary.by, *extra, "records", "gpu_seconds", "gpu_minutes", "gpu_hours"])
    total = summary.total
    rows = [(list(g.key), g) for g in summary.groups]
    rows.append(([TOTAL] + [""] * (len(summary.by) - 1), total))
    for keys, g in rows:
        classes = [",".join(g.classes)] if extra else []
        w.writerow([*keys, *classes, *_numbers(g).values()])
    return buf.getvalue()


def to_json(summary: Summary, namespace: str | None = None, skipped: Sequence[Skipped] = ()) -> str:
    doc = {
        "from": rfc3339(summary.period.start),
        "to": rfc3339(summary.period.end),
        "as_of": rfc3339(summary.now),
        "namespace": namespace,
        "by": list(summary.by),
        "groups": [
            {
                **dict(zip(summary.by, g.key, strict=True)),
                "classes": list(g.classes),
                **_numbers(g),
            }
            for g in summary.groups
        ],
        "total": {"classes": list(summary.total.classes), **_numbers(summary.total)},
        "skipped": [{"record": s.record, "reason": s.reason} for s in skipped],
    }
    return json.dumps(doc, indent=2) + "\n"
