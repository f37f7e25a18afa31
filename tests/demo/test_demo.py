"""`gpu-binder demo`, the README's first command: every act played, the invariants held."""

from __future__ import annotations

import io

from rich.console import Console

from gpu_binder.demo import scenario
from gpu_binder.demo.command import play


async def _play_plain() -> tuple[int, str]:
    out = io.StringIO()
    console = Console(file=out, soft_wrap=True, no_color=True)
    code = await play(console, live=False, speed=1.0)
    return code, out.getvalue()


async def test_the_demo_plays_every_act_and_the_invariants_hold() -> None:
    code, text = await _play_plain()
    assert code == 0
    for act in scenario.ACTS:
        assert act.title in text
    assert text.rstrip().endswith("invariants: OK")


async def test_the_plain_demo_shows_slot_phases_as_letters_with_their_legend() -> None:
    _, text = await _play_plain()
    assert "■" not in text
    assert "slots: . Available  b Bound  A Attached" in text


async def test_the_plain_demo_keeps_each_decision_on_one_line() -> None:
    _, text = await _play_plain()
    decisions = [line for line in text.splitlines() if "GPUOrder" in line]
    assert decisions
    assert all("placed by policy" in line for line in decisions)
