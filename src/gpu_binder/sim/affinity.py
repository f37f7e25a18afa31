"""Which nodes a VMI may be scheduled to: its nodeSelector and required node affinity.

The scheduler's rules: nodeSelectorTerms are ORed, the expressions and fields of one term
are ANDed, and an empty term matches no node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_binder.api.kubevirt import Node
from gpu_binder.sim.builders import HOSTNAME_LABEL


def required_terms(spec: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The required node-selector terms of a pod-like spec, or None when it has none."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return list(required.get("nodeSelectorTerms") or [])


def node_matches(spec: Mapping[str, Any], node: Node) -> bool:
    labels = node.metadata.labels
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    terms = required_terms(spec)
    return terms is None or any(_term(t, node) for t in terms)


def named_nodes(spec: Mapping[str, Any]) -> set[str] | None:
    """The node names the affinity allows, when every term names them; None otherwise.

    Lets the scheduler look at a pinned VMI's node alone instead of at every node.
    """
    terms = required_terms(spec)
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        allowed = _names_of(term)
        if allowed is None:
            return None
        names |= allowed
    return names


def _names_of(term: Mapping[str, Any]) -> set[str] | None:
    found: set[str] | None = None
    for e in term.get("matchFields") or []:
        if e.get("key") == "metadata.name" and e.get("operator") == "In":
            found = set(e.get("values") or []) if found is None else found & set(e["values"])
    for e in term.get("matchExpressions") or []:
        if e.get("key") == HOSTNAME_LABEL and e.get("operator") == "In":
            values = set(e.get("values") or [])
            found = values if found is None else found & values
    return found


def _term(term: Mapping[str, Any], node: Node) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(_holds(e, node.metadata.labels) for e in expressions) and all(
        _holds(f, {"metadata.name": node.name}) for f in fields
    )


def _holds(expression: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    op = expression.get("operator")
    value = values.get(str(expression.get("key")))
    allowed = [str(v) for v in expression.get("values") or []]
    if op == "In":
        return value is not None and value in allowed
    if op == "NotIn":
        return value is None or value not in allowed
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(allowed) == 1:
        try:
            a, b = int(value), int(allowed[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False
