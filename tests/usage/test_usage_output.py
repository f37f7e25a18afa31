"""The bill as a table for people, CSV for spreadsheets and JSON for machines."""

from __future__ import annotations

import csv
import io
import json

from gpu_binder.usage.ledger import Dimension, Kind, Skipped, Summary, summarize
from gpu_binder.usage.report import to_csv, to_json, to_table

from .records import at, entry, period


def bill(*by: Dimension, kind: Kind = "all") -> Summary:
    entries = [
        entry(0, 24, namespace="tenant-a", class_name="h100"),
        entry(0, 1.5, namespace="tenant-b", class_name="l40s"),
        entry(2, 3, namespace="tenant-b", class_name="h100"),
        # tenant-b's h100 VM stopped, its GPU reserved for 2 h.
        entry(3, 5, namespace="tenant-b", class_name="h100", kind="reserved"),
    ]
    return summarize(entries, period(0, 48), by or ("namespace", "class"), now=at(100), kind=kind)


def test_the_table_has_a_row_per_group_and_a_totals_row() -> None:
    lines = to_table(bill()).splitlines()
    assert lines[0] == (
        "GPU usage in [2026-11-01T00:00:00Z, 2026-11-03T00:00:00Z), all namespaces, "
        "as of 2026-11-05T04:00:00Z"
    )
    assert lines[1:] == [
        "NAMESPACE  CLASS  RECORDS  ATTACHED-MIN  RESERVED-MIN  GPU-MINUTES  GPU-HOURS",
        "tenant-a   h100         1      1,440.00          0.00     1,440.00      24.00",
        "tenant-b   h100         2         60.00        120.00       180.00       3.00",
        "tenant-b   l40s         1         90.00          0.00        90.00       1.50",
        "TOTAL                   4      1,590.00        120.00     1,710.00      28.50",
    ]


def test_one_kind_is_billed_alone_and_said_in_the_title() -> None:
    lines = to_table(bill(kind="reserved")).splitlines()
    assert lines[0].startswith("GPUs reserved in [2026-11-01T00:00:00Z, ")
    assert lines[1:] == [
        "NAMESPACE  CLASS  RECORDS  GPU-MINUTES  GPU-HOURS",
        "tenant-b   h100         1       120.00       2.00",
        "TOTAL                   1       120.00       2.00",
    ]
    assert to_table(bill(kind="attached")).splitlines()[0].startswith("GPU use in [")
    assert to_table(bill(kind="attached")).splitlines()[-1].split() == [
        "TOTAL",
        "3",
        "1,590.00",
        "26.50",
    ]


def test_the_table_names_the_namespace_it_covers() -> None:
    assert ", namespace tenant-a, " in to_table(bill(), "tenant-a").splitlines()[0]


def test_without_class_as_a_key_the_table_lists_each_groups_classes() -> None:
    lines = to_table(bill("namespace")).splitlines()
    assert lines[1].split() == [
        "NAMESPACE",
        "CLASSES",
        "RECORDS",
        "ATTACHED-MIN",
        "RESERVED-MIN",
        "GPU-MINUTES",
        "GPU-HOURS",
    ]
    assert lines[3].split() == ["tenant-b", "h100,l40s", "3", "150.00", "120.00", "270.00", "4.50"]


def test_an_empty_bill_is_a_header_and_a_zero_total() -> None:
    empty = summarize([], period(0, 1), ("namespace", "class"), now=at(2))
    assert to_table(empty).splitlines()[2].split() == ["TOTAL", "0", "0.00", "0.00", "0.00", "0.00"]


def test_csv_has_exact_seconds_of_each_kind_and_a_totals_row() -> None:
    rows = list(csv.reader(io.StringIO(to_csv(bill()))))
    assert rows[0] == [
        "namespace",
        "class",
        "records",
        "attached_gpu_seconds",
        "reserved_gpu_seconds",
        "gpu_seconds",
        "gpu_minutes",
        "gpu_hours",
    ]
    assert rows[2] == ["tenant-b", "h100", "2", "3600.0", "7200.0", "10800.0", "180.0", "3.0"]
    assert rows[-1] == ["TOTAL", "", "4", "95400.0", "7200.0", "102600.0", "1710.0", "28.5"]


def test_csv_of_one_kind_has_its_seconds_alone() -> None:
    rows = list(csv.reader(io.StringIO(to_csv(bill(kind="attached")))))
    assert rows[0] == ["namespace", "class", "records", "gpu_seconds", "gpu_minutes", "gpu_hours"]
    assert rows[-1] == ["TOTAL", "", "3", "95400.0", "1590.0", "26.5"]


def test_json_has_the_period_the_groups_the_total_and_what_was_skipped() -> None:
    skipped = [Skipped("tenant-c/bad", "spec.start: Field required")]
    doc = json.loads(to_json(bill(), "tenant-a", skipped))
    assert (doc["from"], doc["to"], doc["as_of"]) == (
        "2026-11-01T00:00:00Z",
        "2026-11-03T00:00:00Z",
        "2026-11-05T04:00:00Z",
    )
    assert (doc["namespace"], doc["kind"], doc["by"]) == ("tenant-a", "all", ["namespace", "class"])
    assert doc["groups"][1] == {
        "namespace": "tenant-b",
        "class": "h100",
        "classes": ["h100"],
        "records": 2,
        "gpu_seconds": 10800.0,
        "gpu_minutes": 180.0,
        "gpu_hours": 3.0,
        "attached": {"gpu_seconds": 3600.0, "gpu_minutes": 60.0, "gpu_hours": 1.0},
        "reserved": {"gpu_seconds": 7200.0, "gpu_minutes": 120.0, "gpu_hours": 2.0},
    }
    assert doc["total"]["gpu_minutes"] == 1710.0
    assert doc["total"]["reserved"]["gpu_minutes"] == 120.0
    assert doc["skipped"] == [{"record": "tenant-c/bad", "reason": "spec.start: Field required"}]


def test_json_of_one_kind_has_no_split() -> None:
    doc = json.loads(to_json(bill(kind="reserved")))
    assert doc["kind"] == "reserved"
    assert [(g["namespace"], g["gpu_minutes"]) for g in doc["groups"]] == [("tenant-b", 120.0)]
    assert "attached" not in doc["groups"][0] and "reserved" not in doc["total"]
