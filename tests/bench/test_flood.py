"""The flood benchmark floods as it says: the big reviews it sends are parsed in slices,
and every victim review is answered (its figures are of answered reviews)."""

from __future__ import annotations

from gpu_binder.bench.flood import run


async def test_a_flood_of_big_reviews_is_parsed_in_slices_and_the_victim_is_answered() -> None:
    figures = await run(samples=5, scenarios=("big_reviews_sliced",), settle=2.0)
    big = figures["big_reviews_sliced"]
    assert big["sliced_parses"] >= 1
    assert big["victim"]["samples"] == 5
