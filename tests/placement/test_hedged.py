"""Hedged ranking: the mix decides only where it can tell scores apart; within its
sampling error the nodes go in first-fit order, whole nodes kept whole first."""

from __future__ import annotations

import pytest

from gpu_binder.placement import Candidate, Demand, Mix, Outlook, hedged, least_stranded
from gpu_binder.placement.choose import fit, margin

A = frozenset({"a"})
PAIR = Demand(2, 0, 0, A)


def first_node(free: dict[str, int], count: int, mix: Mix) -> str:
    outlook = Outlook(mix, {}, {"a": 8})
    order = {"a": count}
    entries = [(f, order) for n, k in free.items() if (f := fit(order, Candidate(n, {"a": k})))]
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


def test_the_margin_shrinks_as_one_over_the_root_of_the_orders_known() -> None:
    f = fit({"a": 1}, Candidate("n", {"a": 4}))
    assert f is not None
    few, many = (margin(f, Outlook(pairs(n), {}, {"a": 8})) for n in (100, 400))
    assert few == pytest.approx(2 * many)


def test_an_order_that_fills_a_whole_node_breaks_nothing() -> None:
    # A 1-GPU order on a 1-GPU node (its class's largest) leaves no GPU of it free, so
    # it ranks with the nodes already broken, not behind them as if it split one.
    outlook = Outlook(pairs(2), {}, {"a": 1, "b": 8})
    one, three = {"a": 1}, {"b": 1}
    filled = fit(one, Candidate("node-a", {"a": 1}))
    broken = fit(three, Candidate("node-b", {"b": 3}))
    assert filled is not None and broken is not None
    ranked = hedged([(broken, three), (filled, one)], least_stranded, outlook)
    assert ranked[0][0].node == "node-a"
