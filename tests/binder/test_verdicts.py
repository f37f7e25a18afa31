"""A step's verdicts: a sweep decides about what is pending, not about every key."""

from __future__ import annotations

from gpu_binder.binder.scope import Scope
from gpu_binder.binder.verdicts import Verdicts

EVERY = {"ns/a": 1, "ns/b": 2, "ns/c": 3}


def _sweep(clean: Verdicts, every: dict[str, int] = EVERY) -> list[str]:
    return Scope(full=True).sweep(every, clean)


def _exhaustive(clean: Verdicts, every: dict[str, int] = EVERY) -> list[str]:
    return Scope(full=True, initial=True).sweep(every, clean)


def test_an_exhaustive_sweep_gives_every_key() -> None:
    assert _exhaustive(Verdicts()) == ["ns/a", "ns/b", "ns/c"]


def test_a_key_found_clean_is_not_swept_again() -> None:
    clean = Verdicts()
    for key in _exhaustive(clean):
        clean[key] = "unchanged"
    assert _sweep(clean) == []


def test_a_key_judged_anew_is_swept_until_found_clean() -> None:
    clean = Verdicts()
    for key in _exhaustive(clean):
        clean[key] = "unchanged"
    clean.forget("ns/b")
    assert _sweep(clean) == ["ns/b"]
    assert _sweep(clean) == ["ns/b"]  # still not found clean
    clean["ns/b"] = "unchanged"
    assert _sweep(clean) == []


def test_a_key_given_to_a_step_that_never_judged_it_stays_due() -> None:
    clean = Verdicts()
    _exhaustive(clean)  # the step skipped every key without a verdict
    assert _sweep(clean) == ["ns/a", "ns/b", "ns/c"]


def test_a_changed_key_the_step_looked_at_but_did_not_judge_stays_due() -> None:
    clean = Verdicts()
    for key in _exhaustive(clean):
        clean[key] = "unchanged"
    clean.looked_at(["ns/d"])  # new since: given to the step, skipped by it
    assert _sweep(clean, {**EVERY, "ns/d": 4}) == ["ns/d"]


def test_a_key_gone_from_the_world_is_not_swept() -> None:
    clean = Verdicts()
    _exhaustive(clean)
    assert _sweep(clean, {"ns/a": 1}) == ["ns/a"]


def test_verdicts_of_gone_keys_are_dropped_once_they_outnumber_the_live_ones() -> None:
    clean = Verdicts()
    for key in _exhaustive(clean):
        clean[key] = "unchanged"
    _exhaustive(clean, {"ns/a": 1})
    assert set(clean) == {"ns/a"}
