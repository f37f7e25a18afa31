"""Runs the demo: live view on a terminal, a plain log when piped; a summary at the end."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from gpu_binder.api.types import GPUUsageRecord
from gpu_binder.binder import of_ledger
from gpu_binder.demo import scenario, view
from gpu_binder.sim.cluster import Cluster


def summary(c: Cluster) -> Table:
    reasons: dict[str, int] = {}
    for n in c.notes():
        reasons[n.reason] = reasons.get(n.reason, 0) + 1
    records = of_ledger(c.client.objects(GPUUsageRecord))
    t = Table(title="summary")
    t.add_column("what")
    t.add_column("count", justify="right")
    rows: list[tuple[str, object]] = [
        ("orders bound", reasons.get("GPUOrder", 0)),
        ("bound on a webhook's request", reasons.get("GPURequest", 0)),
        ("sets moved", reasons.get("GPUMove", 0)),
        ("rebound after a loss", reasons.get("GPURebind", 0)),
        ("room made for an order", reasons.get("GPUMadeRoom", 0)),
        ("adopted", reasons.get("GPUAdopted", 0)),
        ("releases", reasons.get("GPUReleased", 0)),
        ("devices lost", reasons.get("GPULost", 0)),
        ("devices recovered", reasons.get("GPURecovered", 0)),
        ("orders that had to wait", reasons.get("GPUUnplaceable", 0)),
        ("starts refused", reasons.get("GPURefused", 0)),
        (
            "bind requests bound / failed",
            f"{c.stats.requests_bound} / {c.stats.requests_failed}",
        ),
        ("VMIs denied by the webhook", len(c.kubevirt.denials)),
        ("usage records open", sum(1 for r in records if r.spec.end is None)),
        ("usage records closed", sum(1 for r in records if r.spec.end is not None)),
        (
            "GPU-minutes recorded",
            round(
                sum(
                    ((r.spec.end or c.clock()) - r.spec.start).total_seconds() / 60 for r in records
                )
            ),
        ),
    ]
    for what, count in rows:
        t.add_row(what, str(count))
    return t


async def play(console: Console, live: bool, speed: float) -> int:
    c = await scenario.build()
    violations: list[str] = []
    total = len(scenario.ACTS)
    printed = logged = 0
    with _live(console) if live else _Null() as lv:
        for i, act in enumerate(scenario.ACTS, 1):
            if not live:
                console.print(f"\n== [{i}/{total}] {act.title}")
            await act.play(c)
            violations += c.check()
            if live:
                lv.update(view.frame(c, act.title, i, total), refresh=True)
                time.sleep(1.2 / max(speed, 0.01))
            else:
                for _, who, text in c.log.lines[logged:]:
                    if who in ("demo", "webhook"):
                        console.print(f"  {who}: {text}", highlight=False)
                logged = len(c.log.lines)
                for n in c.notes()[printed:]:
                    console.print(
                        f"  {n.type:<7} {n.reason:<16} {n.kind} {n.name}: {n.message}",
                        highlight=False,
                    )
                printed = len(c.notes())
    console.print(view.slots(c, plain=not live))
    if not live:
        console.print(f"slots: {view.PLAIN_LEGEND}", highlight=False)
    console.print(summary(c))
    if violations:
        console.print("invariants: VIOLATED")
        for v in violations:
            console.print(f"  - {v}", highlight=False)
        return 1
    console.print("invariants: OK")
    return 0


def _live(console: Console) -> Live:
    return Live(console=console, auto_refresh=False, transient=False)


class _Null:
    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def update(self, *_: Any, **__: Any) -> None:
        return None


def main_demo(plain: bool = False, speed: float = 1.0) -> int:
    console = Console()
    live = console.is_terminal and not plain and sys.stdout.isatty()
    if not live:
        # A log, not a screen: each line whole, however long, for grep and for CI logs.
        console = Console(soft_wrap=True, no_color=not console.is_terminal)
    return asyncio.run(play(console, live, speed))
