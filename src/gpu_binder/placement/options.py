"""Orders that several classes may serve: the concrete orders an order stands for.

A VM orders GPUs per class by naming each class's resourceName in its GPU entries. The
annotation `gpu.cozystack.io/classes: h100,a100` on the VM (or its template, or a
standalone VMI) makes the listed classes interchangeable for it: its entries naming any
of them form one group, which any one listed class may serve whole. A set never mixes
them (a tenant's multi-GPU job wants identical GPUs), and entries of classes not listed
keep their class. Names of classes that do not exist are ignored.

So {h100: 4} with alternatives {h100, a100} stands for {h100: 4} or {a100: 4}; once a set
holds devices of one of them, the order *is* that option (`resolve`) until the set is
gone, so completing, normalizing and moving a set never switch its class behind the
tenant's back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def group(order: Mapping[str, int], alternatives: Collection[str]) -> tuple[str, ...]:
    """The ordered classes that are interchangeable here; () when nothing is."""
    named = [c for c in order if c in alternatives]
    if not named or len(set(alternatives)) < 2:
        return ()
    return tuple(named)


def options(order: Mapping[str, int], alternatives: Collection[str]) -> list[dict[str, int]]:
    """Every concrete order that serves `order`, the one its entries name first.

    `alternatives` should hold only existing classes; the order's own class comes first,
    the others in name order, so ties between them always break the same way.
    """
    named = group(order, alternatives)
    if not named:
        return [dict(order)]
    count = sum(order[c] for c in named)
    fixed = {c: n for c, n in order.items() if c not in alternatives}
    main = max(named, key=lambda c: (order[c], c))
    out: list[dict[str, int]] = []
    for c in [main, *sorted(set(alternatives) - {main})]:
        option = dict(fixed)
        option[c] = count
        out.append(option)
    return out


def resolve(
    order: Mapping[str, int], alternatives: Collection[str], held: Mapping[str, int]
) -> dict[str, int]:
    """The option a set holding `held` (devices per class) is already taking, else `order`.

    The interchangeable class the set holds most devices of wins (then the first name);
    a set holding none of them leaves the order as its entries say.
    """
    named = group(order, alternatives)
    chosen = serving(alternatives, held) if named else None
    if chosen is None:
        return dict(order)
    resolved = {c: n for c, n in order.items() if c not in alternatives}
    resolved[chosen] = sum(order[c] for c in named)
    return resolved


def serving(alternatives: Collection[str], held: Mapping[str, int]) -> str | None:
    """The interchangeable class that serves the group for a set holding `held` (devices
    per class): the one it holds most of, then the first name; None when it holds none."""
    taken = [c for c in sorted(alternatives) if held.get(c, 0) > 0]
    return max(taken, key=lambda c: held[c]) if taken else None  # max keeps the first
