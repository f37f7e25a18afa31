"""Label selectors in the API's string form: `a=b`, `a!=b`, `a in (x)`, `a notin (x)`, `a`, `!a`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?"
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    # One of "in", "notin", "exists", "!exists"; equality is "in" with one value.
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "in":
            return value is not None and value in self.values
        if self.op == "notin":
            return value is None or value not in self.values
        if self.op == "exists":
            return value is not None
        return value is None


def _split(text: str) -> list[str]:
    """Split at the commas between requirements, not at those inside `in (...)`."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _requirement(part: str) -> Requirement:
    if m := _EQUALITY.match(part):
        return Requirement(m[1], "notin" if m[2] == "!=" else "in", frozenset({m[3]}))
    if m := _SET.match(part):
        values = frozenset(v.strip() for v in m[3].split(",") if v.strip())
        return Requirement(m[1], m[2], values)
    if m := _EXISTS.match(part):
        return Requirement(m[2], "!exists" if m[1] else "exists")
    raise ValueError(f"invalid label selector requirement {part!r}")


@lru_cache(maxsize=256)
def parse_selector(text: str) -> tuple[Requirement, ...]:
    """The requirements of a selector, all of which must hold; empty text selects everything."""
    if not text.strip():
        return ()
    return tuple(_requirement(p) for p in _split(text))


@lru_cache(maxsize=256)
def _matcher(text: str) -> Callable[[Mapping[str, str]], bool]:
    """One function for a selector: relisting every record of a big kind calls it often."""
    requirements = parse_selector(text)
    if len(requirements) == 1:
        return _compiled(requirements[0])

    def matches(labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in requirements)

    return matches


def _compiled(r: Requirement) -> Callable[[Mapping[str, str]], bool]:
    """r.matches without its dispatch on the operator, for a requirement used alone."""
    key, values = r.key, r.values
    if r.op == "in":
        return lambda labels: (value := labels.get(key)) is not None and value in values
    if r.op == "notin":
        return lambda labels: (value := labels.get(key)) is None or value not in values
    if r.op == "exists":
        return lambda labels: labels.get(key) is not None
    return lambda labels: labels.get(key) is None


def selector_matches(text: str, labels: Mapping[str, str]) -> bool:
    """Whether labels satisfy the selector; raises ValueError on a malformed selector."""
    return _matcher(text)(labels)


def selector_matcher(text: str) -> Callable[[Mapping[str, str]], bool]:
    """The selector as one function of labels, for a list to call on every object;
    raises ValueError on a malformed selector."""
    return _matcher(text)
