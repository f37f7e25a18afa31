"""Node affinity as the scheduler reads it: terms ORed, expressions ANDed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpu_binder.sim.affinity import named_nodes, node_matches
from gpu_binder.sim.builders import HOSTNAME_LABEL, node_object

NODE = node_object("n1", datetime(2025, 1, 1, tzinfo=UTC), labels={"zone": "a", "gpus": "8"})


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        (expr("zone", "In", "a", "b"), True),
        (expr("zone", "In", "b"), False),
        (expr("zone", "NotIn", "b"), True),
        (expr("zone", "NotIn", "a"), False),
        (expr("missing", "NotIn", "a"), True),
        (expr("zone", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("missing", "DoesNotExist"), True),
        (expr("zone", "DoesNotExist"), False),
        (expr("gpus", "Gt", "4"), True),
        (expr("gpus", "Lt", "4"), False),
    ],
)
def test_an_expression_holds_by_its_operator(expression: dict[str, Any], matches: bool) -> None:
    assert node_matches(required({"matchExpressions": [expression]}), NODE) is matches


def test_no_affinity_allows_every_node() -> None:
    assert node_matches({}, NODE)


def test_the_expressions_of_a_term_must_all_hold() -> None:
    term = {"matchExpressions": [expr("zone", "In", "a"), expr("gpus", "In", "4")]}
    assert not node_matches(required(term), NODE)


def test_one_matching_term_is_enough() -> None:
    terms = [
        {"matchExpressions": [expr("zone", "In", "b")]},
        {"matchExpressions": [expr("zone", "In", "a")]},
    ]
    assert node_matches(required(*terms), NODE)


def test_an_empty_term_matches_no_node() -> None:
    assert not node_matches(required({}), NODE)


def test_match_fields_select_by_node_name() -> None:
    term = {"matchFields": [expr("metadata.name", "In", "n1")]}
    assert node_matches(required(term), NODE)
    assert not node_matches(required({"matchFields": [expr("metadata.name", "In", "n2")]}), NODE)


def test_a_node_selector_must_match_too() -> None:
    assert not node_matches({"nodeSelector": {"zone": "b"}}, NODE)


def test_named_nodes_are_the_union_of_the_names_each_term_allows() -> None:
    terms = [
        {"matchFields": [expr("metadata.name", "In", "n1")]},
        {"matchExpressions": [expr(HOSTNAME_LABEL, "In", "n2")]},
    ]
    assert named_nodes(required(*terms)) == {"n1", "n2"}


def test_named_nodes_is_none_when_a_term_names_no_node() -> None:
    terms = [
        {"matchFields": [expr("metadata.name", "In", "n1")]},
        {"matchExpressions": [expr("zone", "In", "a")]},
    ]
    assert named_nodes(required(*terms)) is None
