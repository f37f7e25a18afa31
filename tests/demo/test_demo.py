"""`gpu-binder demo`, the README's first command: every act played, the invariants held."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Awaitable, Callable

import pytest
from rich.console import Console

from gpu_binder.demo import kubevirt_acts, scenario
from gpu_binder.demo.command import play
from gpu_binder.sim.cluster import Cluster


async def _play_plain() -> tuple[int, str]:
    out = io.StringIO()
    console = Console(file=out, soft_wrap=True, no_color=True)
    code = await play(console, live=False, speed=1.0)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def played() -> tuple[int, str]:
    """The demo played once for the module: the run is deterministic, its log read many times."""
    return asyncio.run(_play_plain())


@pytest.fixture(scope="module")
def text(played: tuple[int, str]) -> str:
    return played[1]


def act_log(text: str, act: Callable[[Cluster], Awaitable[None]]) -> str:
    """The lines the act printed: from its heading to the next act's, or to the slots table."""
    [title] = [a.title for a in scenario.ACTS if a.play is act]
    start = text.index(f"] {title}\n")
    rest = text[start:]
    end = min((i for i in (rest.find("\n== [", 1), rest.find("\n┏")) if i > 0), default=len(rest))
    return rest[:end]


def lines_with(log: str, *parts: str) -> list[str]:
    return [line for line in log.splitlines() if all(p in line for p in parts)]


def summary_count(text: str, what: str) -> str:
    found = re.search(rf"│ {re.escape(what)}\s*│\s*([^│]+?)\s*│", text)
    assert found, f"no summary row {what!r}"
    return found.group(1)


def test_the_demo_plays_every_act_and_the_invariants_hold(played: tuple[int, str]) -> None:
    code, text = played
    assert code == 0
    for act in scenario.ACTS:
        assert act.title in text
    assert text.rstrip().endswith("invariants: OK")


def test_the_plain_demo_shows_slot_phases_as_letters_with_their_legend(text: str) -> None:
    assert "■" not in text
    assert "slots: . Available  b Bound  A Attached" in text


def test_the_plain_demo_keeps_each_decision_on_one_line(text: str) -> None:
    decisions = [line for line in text.splitlines() if "GPUOrder" in line]
    assert decisions
    assert all("placed by policy" in line or "completes the set" in line for line in decisions)


def test_each_new_act_says_the_rule_it_shows(text: str) -> None:
    for act in (
        scenario.refused,
        scenario.foreign_slot,
        scenario.degraded,
        scenario.asked_node,
        scenario.defrag,
        scenario.ambiguous,
    ):
        assert lines_with(act_log(text, act), "demo: rule: "), act.__name__


def test_a_start_that_fits_nowhere_is_denied_with_the_binders_reason(text: str) -> None:
    log = act_log(text, scenario.refused)
    [denied] = lines_with(log, "webhook: denied globex/render-1: ")
    reason = denied.split("webhook: denied globex/render-1: ", 1)[1]
    assert "× l40s requested" in reason
    [refused] = lines_with(log, "Warning GPURefused", "VirtualMachine render-1")
    assert refused.endswith(f"render-1: {reason}")


def test_a_vmi_naming_a_slot_outside_its_set_is_denied(text: str) -> None:
    log = act_log(text, scenario.foreign_slot)
    [named] = re.findall(r"VMI snoop naming (gpu\.cozystack\.io/\S+):", log)
    [denied] = lines_with(log, "webhook: denied hooli/snoop: ")
    assert named in denied
    assert not lines_with(text, "admitted hooli/snoop")


def test_a_node_whose_plugin_serves_too_few_slots_is_degraded_and_recovers(text: str) -> None:
    log = act_log(text, scenario.degraded)
    [node] = re.findall(r"demo: after the 2-minute grace (\S+) has GPUDegraded=True", log)
    lost = lines_with(log, "Warning GPULost", f"the device plugin on {node} does not serve it")
    assert len(lost) == 2
    assert lines_with(log, "GPUMove", f"node {node} is degraded; moved from {node}")
    assert len(lines_with(log, "GPURecovered")) == 2
    assert lines_with(log, f"demo: {node} serves all its slots again: GPUDegraded=False")


def test_a_vm_asking_for_a_node_has_its_stopped_set_moved_there(text: str) -> None:
    log = act_log(text, scenario.asked_node)
    [target] = re.findall(r"with gpu\.cozystack\.io/node=(\S+)", log)
    [moved] = lines_with(log, "GPUMove", "VirtualMachine notebook")
    assert f"the VM asks for node {target}" in moved
    assert lines_with(log, f"demo: notebook is now on {target}")


def test_defragmentation_moves_a_stopped_set_to_make_room_for_a_whole_node_order(
    text: str,
) -> None:
    log = act_log(text, scenario.defrag)
    moved = lines_with(log, "GPUMove", "makes room for it")
    assert moved
    [made] = lines_with(log, "GPUMadeRoom", "VirtualMachine big-2")
    for line in moved:
        vm = line.split("VirtualMachine ", 1)[1].split(":", 1)[0]
        assert f"/{vm}" in made
    [bound] = lines_with(log, "GPUOrder", "VirtualMachine big-2")
    assert "bound 8 GPUs" in bound
    assert lines_with(log, "webhook: admitted initech/big-2")
    # The VM that asked for its node is never moved for room.
    assert not lines_with(log, "GPUMove", "VirtualMachine notebook")


def test_a_gpu_matching_two_classes_is_shown_on_both_and_bound_by_neither(text: str) -> None:
    log = act_log(text, scenario.ambiguous)
    for name in ("h100", "h100-nvl"):
        assert lines_with(log, f"demo: class {name}: Ready=False AmbiguousMatch")
    assert lines_with(log, "dev-3", "waits with 0 GPUs")
    assert lines_with(log, "class h100 Ready=True")
    assert lines_with(log, "GPUOrder", "VirtualMachine dev-3")


def test_the_summary_counts_the_new_decisions(text: str) -> None:
    assert summary_count(text, "room made for an order") == "1"
    assert int(summary_count(text, "starts refused")) >= 1
    assert int(summary_count(text, "VMIs denied by the webhook")) >= 2
    assert int(summary_count(text, "devices recovered")) >= 2
    bound, failed = summary_count(text, "bind requests bound / failed").split(" / ")
    assert int(bound) >= 1 and int(failed) >= 1


def test_the_instancetype_vm_holds_the_recorded_revisions_gpus(text: str) -> None:
    log = act_log(text, kubevirt_acts.instancetype)
    assert lines_with(log, "keeps its recorded revision: 2 GPUs")
    assert lines_with(log, "initech starts infer-it: 2 GPUs", "(2 attached)")


def test_a_template_edit_while_running_adopts_no_gpu(text: str) -> None:
    log = act_log(text, kubevirt_acts.template_edit)
    assert lines_with(log, "while it runs: 1 GPUs", "0 adopted")
    assert lines_with(log, "acme restarts edit-1: 2 GPUs")
