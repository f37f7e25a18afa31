"""Hedged ranking: the mix decides only where it can tell scores apart; within its
sampling error the nodes go in first-fit order, those where the order would waste a gap a
known order needs last, whole nodes kept whole first with GPUs no known order needs in
their place, and a node the order fills goes first where a known order needs the gap
first fit would cut."""

from __future__ import annotations

import pytest

from gpu_binder.placement import Candidate, Demand, Mix, Outlook, hedged, least_stranded
from gpu_binder.placement.choose import fit, margin

A = frozenset({"a"})
AB = frozenset({"a", "b"})
PAIR = Demand(2, 0, 0, A)


def first_node(free: dict[str, int], count: int, mix: Mix) -> str:
    outlook = Outlook(mix, {}, {"a": 8})
    order = {"a": count}
    entries = [(f, order) for n, k in free.items() if (f := fit(order, Candidate(n, {"a": k})))]
    return hedged(entries, least_stranded, outlook)[0][0].node


def first_of(outlook: Outlook, *options: tuple[Candidate, dict[str, int]], cpu: int = 0) -> str:
    """The node ranked first among candidates, each with the order it would take."""
    entries = []
    for candidate, order in options:
        f = fit(order, candidate, cpu)
        assert f is not None
        entries.append((f, order))
    return hedged(entries, least_stranded, outlook)[0][0].node


def pairs(n: int) -> Mix:
    mix = Mix()
    mix.add(PAIR, n)
    return mix


def test_with_few_orders_known_the_first_node_that_fits_takes_the_order() -> None:
    # node-a's third GPU would be stranded for pairs; two known pairs do not say so
    # beyond their sampling error, so first fit decides.
    assert first_node({"node-a": 3, "node-b": 4}, 2, pairs(2)) == "node-a"


def test_once_the_mix_is_known_beyond_its_sampling_error_the_score_decides() -> None:
    assert first_node({"node-a": 3, "node-b": 4}, 2, pairs(400)) == "node-b"


def test_among_scores_the_mix_cannot_tell_apart_a_whole_node_stays_whole() -> None:
    assert first_node({"node-a": 8, "node-b": 3}, 1, pairs(2)) == "node-b"


def test_among_scores_the_mix_cannot_tell_apart_a_node_the_order_fills_goes_first() -> None:
    # One GPU of node-b, or one of node-a's three: no known pair is stranded either way,
    # but node-b's leaves nothing behind and node-a keeps its gap for a pair.
    assert first_node({"node-a": 3, "node-b": 1}, 1, pairs(2)) == "node-b"


def test_a_node_the_order_fills_waits_its_turn_when_no_known_order_needs_the_gap() -> None:
    # Only single GPUs are known: node-a's three serve them as well as node-b's one.
    singles = Mix()
    singles.add(Demand(1, 0, 0, A), 2)
    assert first_node({"node-a": 3, "node-b": 1}, 1, singles) == "node-a"


def test_a_node_of_another_class_the_order_fills_keeps_its_place_in_node_order() -> None:
    # Filling node-b would draw on class b's GPUs rather than a's: which pool to use is
    # the price's question, so within the margin the node order decides.
    outlook = Outlook(pairs(2), {}, {"a": 8, "b": 8})
    gap, filled = Candidate("node-a", {"a": 3}), Candidate("node-b", {"b": 1})
    assert first_of(outlook, (filled, {"b": 1}), (gap, {"a": 1})) == "node-a"


def test_the_margin_shrinks_as_one_over_the_root_of_the_orders_known() -> None:
    f = fit({"a": 1}, Candidate("n", {"a": 4}))
    assert f is not None
    few, many = (margin(f, Outlook(pairs(n), {}, {"a": 8})) for n in (100, 400))
    assert few == pytest.approx(2 * many)


def test_an_order_that_fills_a_whole_node_breaks_nothing() -> None:
    # A 1-GPU order on a 1-GPU node (its class's largest) leaves no GPU of it free, so
    # it ranks with the nodes already broken, not behind them as if it split one.
    outlook = Outlook(pairs(2), {}, {"a": 1, "b": 8})
    filled, broken = Candidate("node-a", {"a": 1}), Candidate("node-b", {"b": 3})
    assert first_of(outlook, (broken, {"b": 1}), (filled, {"a": 1})) == "node-a"


def test_a_few_hundred_orders_agreeing_keep_a_gpu_from_being_left_without_cores() -> None:
    # Every known order takes 1 GPU and 24 cores. On node-a (2 GPUs, 32 cores) one would
    # leave a GPU with 8 cores, which no known order can use; node-b is a whole node of
    # 4 GPUs and 128 cores. The fallback keeps node-b whole, so only the score can move
    # the order there, and 300 orders that all agree must be enough for it to.
    mix = Mix()
    mix.add(Demand(1, 24_000, 0, A), 300)
    outlook = Outlook(mix, {}, {"a": 4})
    cramped = Candidate("node-a", {"a": 2}, cpu_free=32_000)
    whole = Candidate("node-b", {"a": 4}, cpu_free=128_000)
    assert first_of(outlook, (cramped, {"a": 1}), (whole, {"a": 1}), cpu=24_000) == "node-b"


def whole_a_or_small_b(*restricted: frozenset[str]) -> str:
    """The first node for a flexible pair: node-a, a whole a node first in node order, or
    node-b, a node of b's largest size the pair fills (breaking nothing); the mix knows
    two flexible pairs and one pair of each `restricted` set of classes."""
    mix = Mix()
    mix.add(Demand(2, 0, 0, frozenset({"a", "b"})), 2)
    for classes in restricted:
        mix.add(Demand(2, 0, 0, classes))
    outlook = Outlook(mix, {}, {"a": 8, "b": 2})
    whole, small = Candidate("node-a", {"a": 8}), Candidate("node-b", {"b": 2})
    return first_of(outlook, (whole, {"a": 2}), (small, {"b": 2}))


def test_a_whole_node_is_kept_whole_with_a_node_of_another_class_no_known_order_needs() -> None:
    # Every known order could use a as well as b; an a-only one does not need b either.
    assert whole_a_or_small_b() == "node-b"
    assert whole_a_or_small_b(frozenset({"a"})) == "node-b"


def test_a_whole_node_is_not_kept_whole_with_gpus_a_known_order_needs_in_its_place() -> None:
    # A known pair takes b only: node-b is its home, and the flexible pair filling it
    # would leave it nowhere. Which pool to draw on is the price's question: within the
    # margin, first fit decides, and node-a comes first in node order.
    assert whole_a_or_small_b(frozenset({"b"})) == "node-a"


def test_a_whole_node_is_kept_whole_with_a_small_node_no_order_needing_its_class_fits() -> None:
    # Sweep draw 3: the 8-GPU orders need b (only b has 8-GPU nodes), but not b's 1-GPU
    # nodes, so a 1-GPU order may fill one of those to keep an a node whole.
    mix = Mix()
    mix.set_shapes({"a": frozenset({(4, 0, 0)}), "b": frozenset({(1, 0, 0), (8, 0, 0)})})
    mix.add(Demand(1, 0, 0, AB), 2)
    mix.add(Demand(8, 0, 0, AB), 2)
    outlook = Outlook(mix, {}, {"a": 4, "b": 8})
    whole = Candidate("node-a", {"a": 4}, shape=(4, 0, 0))
    small = Candidate("node-b", {"b": 1}, shape=(1, 0, 0))
    assert first_of(outlook, (whole, {"a": 1}), (small, {"b": 1})) == "node-b"


def test_a_whole_node_is_kept_whole_with_a_broken_node_of_its_own_class() -> None:
    # Orders restricted to a do not stop the pair from keeping an a node whole with
    # another a node: it draws on the same pool either way.
    mix = Mix()
    mix.add(Demand(2, 0, 0, A), 3)
    outlook = Outlook(mix, {}, {"a": 8})
    whole, broken = Candidate("node-a", {"a": 8}), Candidate("node-b", {"a": 5})
    assert first_of(outlook, (whole, {"a": 2}), (broken, {"a": 2})) == "node-b"


def single_of_24_cores(*known: Demand) -> str:
    """The first node for a 1-GPU, 24-core order, with few orders known: node-a, a 2-GPU
    node of 32 cores first in node order, or node-b, a whole 4-GPU node of 128 cores."""
    mix = Mix()
    for demand in known:
        mix.add(demand)
    outlook = Outlook(mix, {}, {"a": 4})
    cramped = Candidate("node-a", {"a": 2}, cpu_free=32_000)
    whole = Candidate("node-b", {"a": 4}, cpu_free=128_000)
    return first_of(outlook, (cramped, {"a": 1}), (whole, {"a": 1}), cpu=24_000)


def test_among_scores_the_mix_cannot_tell_apart_no_gap_a_known_order_needs_is_wasted() -> None:
    # Sweep draw 2006: on node-a the order would leave a GPU with 8 cores, which no known
    # order can use, where a known 32-core pair could have used both GPUs. That GPU is
    # lost for certain; breaking node-b loses something only if a 4-GPU order comes.
    known = (Demand(2, 32_000, 0, A), Demand(1, 16_000, 0, A), Demand(1, 24_000, 0, A))
    assert single_of_24_cores(*known) == "node-b"


def test_a_gpu_no_order_could_have_used_is_left_where_no_known_order_needs_the_node() -> None:
    # Only 24-core singles are known: node-a could never hold more than one of them, so
    # the order takes what node-a was good for, and node-b stays whole.
    assert single_of_24_cores(Demand(1, 24_000, 0, A), Demand(1, 24_000, 0, A)) == "node-a"
