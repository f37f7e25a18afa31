"""`gpu-binder usage --since-last FILE`: a nightly export that starts where the last one
ended, its state written only once the report is out."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpu_binder.sim.memory import MemoryClient
from gpu_binder.usage.command import main_usage

from .records import at, record
from .test_usage_command import ListForbidden, serving


@pytest.fixture
def ledger() -> MemoryClient:
    c = MemoryClient(clock=lambda: at(0))
    c.put(record("r1", at(1), at(3), namespace="tenant-a"))
    c.put(record("r2", at(2), None, namespace="tenant-b", vm="vm-2"))
    return c


def run(client: MemoryClient, now: datetime, *argv: str) -> int:
    return main_usage(list(argv), connect=serving(client), clock=lambda: now)


def bill(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_the_first_export_needs_from(
    ledger: MemoryClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ledger, at(5), "--since-last", str(tmp_path / "state")) == 2
    assert "does not exist: the first export needs --from" in capsys.readouterr().err


def test_each_export_starts_where_the_last_ended(
    ledger: MemoryClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    assert run(ledger, at(5), "--since-last", state, "--from", "2026-11-01", "-o", "json") == 0
    one = bill(capsys)
    assert (one["from"], one["to"]) == ("2026-11-01T00:00:00Z", "2026-11-01T05:00:00Z")
    assert one["total"]["gpu_hours"] == 5.0  # r1's 2 h, r2's 3 h so far
    assert run(ledger, at(9), "--since-last", state, "-o", "json") == 0
    two = bill(capsys)
    assert (two["from"], two["to"]) == ("2026-11-01T05:00:00Z", "2026-11-01T09:00:00Z")
    assert [(g["namespace"], g["gpu_hours"]) for g in two["groups"]] == [("tenant-b", 4.0)]
    assert two["since_last"]["origin"] == "2026-11-01T00:00:00Z"
    assert two["since_last"]["corrections"] == 0


def test_from_is_refused_once_an_export_ran(
    ledger: MemoryClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    assert run(ledger, at(5), "--since-last", state, "--from", "2026-11-01") == 0
    capsys.readouterr()
    assert run(ledger, at(6), "--since-last", state, "--from", "2026-11-01") == 2
    assert "--from starts a first export only" in capsys.readouterr().err


def test_a_month_is_no_export(ledger: MemoryClient, tmp_path: Path) -> None:
    assert run(ledger, at(5), "--since-last", str(tmp_path / "s"), "--month", "2026-11") == 2


def test_a_state_of_another_scope_is_refused(
    ledger: MemoryClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    assert run(ledger, at(5), "--since-last", state, "--from", "2026-11-01", "-n", "tenant-a") == 0
    capsys.readouterr()
    assert run(ledger, at(6), "--since-last", state, "--kind", "reserved", "-n", "tenant-a") == 2
    err = capsys.readouterr().err
    assert "written by an export of namespace tenant-a, kind all" in err


def test_an_export_that_failed_leaves_the_state_as_it_was(
    ledger: MemoryClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "state"
    assert run(ledger, at(5), "--since-last", str(path), "--from", "2026-11-01") == 0
    before = path.read_text()
    assert (
        main_usage(
            ["--since-last", str(path)], connect=serving(ListForbidden()), clock=lambda: at(7)
        )
        == 1
    )
    assert path.read_text() == before


def test_an_export_ahead_of_its_state_is_refused(
    ledger: MemoryClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    assert run(ledger, at(5), "--since-last", state, "--from", "2026-11-01") == 0
    capsys.readouterr()
    assert run(ledger, at(9), "--since-last", state, "--to", "2026-11-01T04:00:00Z") == 2
    assert "exported until 2026-11-01T05:00:00Z already" in capsys.readouterr().err
