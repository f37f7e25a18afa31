"""Orders several classes may serve: the concrete orders they stand for, and the one a set
already holds."""

from __future__ import annotations

from gpu_binder.placement.options import options, resolve

BOTH = ("h100", "a100")


def test_an_order_without_alternatives_is_only_itself() -> None:
    assert options({"h100": 4}, ()) == [{"h100": 4}]
    assert options({"h100": 4}, ("h100",)) == [{"h100": 4}]


def test_the_group_goes_whole_to_one_class_the_named_one_first() -> None:
    assert options({"h100": 4}, BOTH) == [{"h100": 4}, {"a100": 4}]


def test_entries_naming_two_interchangeable_classes_form_one_group() -> None:
    assert options({"h100": 2, "a100": 2}, BOTH) == [{"h100": 4}, {"a100": 4}]


def test_classes_not_listed_keep_their_entries_in_every_option() -> None:
    assert options({"h100": 2, "t4": 1}, BOTH) == [{"h100": 2, "t4": 1}, {"a100": 2, "t4": 1}]


def test_alternatives_for_classes_the_order_does_not_name_change_nothing() -> None:
    assert options({"t4": 1}, BOTH) == [{"t4": 1}]


def test_a_set_holding_an_alternative_class_is_completed_in_it() -> None:
    assert resolve({"h100": 4}, BOTH, {"a100": 1}) == {"a100": 4}
    assert resolve({"h100": 2, "t4": 1}, BOTH, {"a100": 2, "t4": 1}) == {"a100": 2, "t4": 1}


def test_a_set_holding_none_of_them_leaves_the_order_as_named() -> None:
    assert resolve({"h100": 4}, BOTH, {}) == {"h100": 4}
    assert resolve({"h100": 4}, BOTH, {"t4": 1}) == {"h100": 4}


def test_a_set_holding_two_of_them_takes_the_one_it_holds_most_of() -> None:
    assert resolve({"h100": 4}, BOTH, {"h100": 1, "a100": 3}) == {"a100": 4}
    assert resolve({"h100": 4}, BOTH, {"h100": 2, "a100": 2}) == {"a100": 4}  # the first name
