"""GPU quotas (DESIGN §2 invariant 10, §4 "Quota"): what a namespace may hold of a class,
what it holds, and whether a bind would take it past that.

A namespace's ResourceQuotas limit a class by its resourceName, as Kubernetes spells
extended-resource quotas: `requests.<resourceName>` and `limits.<resourceName>`; every
entry of every unscoped quota counts, and the lowest wins (Kubernetes enforces each
quota alone). A quota on a name that is no class's resourceName is not gpu-binder's.

What a namespace holds of a class is every device bound to one of its orders, attached
or not: a stopped VM's reservation takes a GPU from everyone else as much as a running
VM does, and Kubernetes' own quota never sees it (with `pinning: Device` it sees no
GPU at all: the launcher pod requests slot resources). Only new binds of an order
(orders, bind requests) are held to the quota; moves, rebinds and adoption keep what is
held, and a quota lowered below what a namespace holds disturbs nothing it holds.

An entry that is not a whole, non-negative number of GPUs is malformed: it is reported
(an Event on the quota, a condition on the class) and enforced as its whole part, or as
0 when it is no quantity at all, so no quota read wrongly lets a namespace take more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpu_binder.api.meta import Condition
from gpu_binder.api.quantity import QuantityError, parse_quantity
from gpu_binder.api.quota import ResourceQuota
from gpu_binder.binder.plan import Note
from gpu_binder.cache.world import World
from gpu_binder.placement.options import options

PREFIXES = ("requests.", "limits.")


@dataclass(frozen=True, slots=True)
class Limit:
    """The lowest hard limit on a class in a namespace, and the entry that sets it."""

    hard: int
    quota: str  # the ResourceQuota's name
    entry: str  # e.g. requests.nvidia.com/GH100_H100_SXM5_80GB


@dataclass(frozen=True, slots=True)
class Problem:
    """A quota entry on a class's resourceName that is no whole number of GPUs."""

    quota: ResourceQuota
    entry: str
    value: str
    why: str
    class_name: str

    @property
    def message(self) -> str:
        return f"{self.entry}: {self.value!r} {self.why}"


@dataclass(frozen=True, slots=True)
class Exceeded:
    """A bind that would take a namespace past its quota of a class: used, hard, asked."""

    namespace: str
    class_name: str
    used: int
    hard: int
    asked: int
    limit: Limit

    @property
    def message(self) -> str:
        return (
            f"GPU quota exceeded: namespace {self.namespace} holds {self.used} of the "
            f"{self.hard} × {self.class_name} its quota allows (ResourceQuota "
            f"{self.limit.quota}, {self.limit.entry}: {self.limit.hard}) and this VM asks "
            f"for {self.asked} more; GPUs bound to stopped VMs count too: delete a VM you "
            "no longer need, or ask for a larger quota"
        )


@dataclass(frozen=True, slots=True)
class Quotas:
    """A namespace's limits per class, and the malformed entries found reading them."""

    limits: dict[str, Limit]
    problems: tuple[Problem, ...]


def of_namespace(world: World, namespace: str) -> Quotas:
    """The namespace's quotas, read once per change of its quotas or of the classes."""
    gen = (world.quota_gen.get(namespace, 0), world.class_gen)
    cached = world.quota_cache.get(namespace)
    if cached is not None and cached[0] == gen and isinstance(cached[1], Quotas):
        return cached[1]
    limits: dict[str, Limit] = {}
    problems: list[Problem] = []
    for key in sorted(world.quotas_by_namespace.get(namespace, ())):
        q = world.quotas[key]
        if q.scoped:
            continue
        for entry, value in sorted(q.hard.items()):
            cls = _class_of(world, entry)
            if cls is None:
                continue
            hard, why = _whole(value)
            if why:
                problems.append(Problem(q, entry, value, why, cls))
            old = limits.get(cls)
            if old is None or hard < old.hard:
                limits[cls] = Limit(hard, q.metadata.name, entry)
    out = Quotas(limits, tuple(problems))
    world.quota_cache[namespace] = (gen, out)
    return out


def _class_of(world: World, entry: str) -> str | None:
    for prefix in PREFIXES:
        if entry.startswith(prefix):
            cls = world.class_by_resource.get(entry[len(prefix) :])
            return cls.metadata.name if cls is not None else None
    return None


def _whole(value: str) -> tuple[int, str]:
    """The GPUs an entry allows, and why it is malformed ("" when it is not)."""
    try:
        q = parse_quantity(value)
    except QuantityError:
        return 0, "is not a quantity; no new GPUs of the class are bound until it is fixed"
    if q < 0:
        return 0, "is negative; no new GPUs of the class are bound until it is fixed"
    if q.denominator != 1:
        n = math.floor(q)
        return n, f"is not a whole number of GPUs; enforced as {n}"
    return int(q), ""


def held(world: World, namespace: str, class_name: str) -> int:
    """GPUs of the class bound to the namespace's orders, attached or not."""
    h = world.devices.held
    return h.get((namespace, class_name, "bound"), 0) + h.get(
        (namespace, class_name, "attached"), 0
    )


def admits(
    world: World,
    namespace: str,
    added: Mapping[str, int],
    removed: Mapping[str, int] | None = None,
) -> Exceeded | None:
    """Whether the namespace may bind `added` GPUs per class while `removed` leave its
    orders' sets: None, or the first class it would exceed."""
    limits = of_namespace(world, namespace).limits
    for class_name, n in sorted(added.items()):
        limit = limits.get(class_name)
        if limit is None or n <= 0:
            continue
        used = held(world, namespace, class_name) - (removed or {}).get(class_name, 0)
        if used + n > limit.hard:
            return Exceeded(namespace, class_name, max(used, 0), limit.hard, n, limit)
    return None


def steer(
    world: World,
    namespace: str,
    order: Mapping[str, int],
    alternatives: Sequence[str],
    removed: Mapping[str, int],
) -> tuple[dict[str, int], tuple[str, ...]] | Exceeded:
    """The order and alternatives placement may choose among within the quota: options
    whose classes the quota refuses are left out (the order's own first, as options
    lists them). Exceeded when none is left."""
    opts = options(order, alternatives)
    kept: list[dict[str, int]] = []
    first: Exceeded | None = None
    for o in opts:
        exceeded = admits(world, namespace, o, removed)
        if exceeded is None:
            kept.append(o)
        elif first is None:
            first = exceeded
    if not kept:
        assert first is not None
        return first
    if len(kept) == len(opts):
        return dict(order), tuple(alternatives)
    classes = tuple(sorted({c for o in kept for c in o if c in alternatives}))
    return kept[0], classes if len(classes) > 1 else ()


# --- telling operators about malformed quotas ------------------------------------------

CONDITION = "QuotasValid"


def problems(world: World) -> tuple[Problem, ...]:
    """Every malformed entry of every namespace's quotas, read again only when a quota or
    a class changed (a pass asks for them every time)."""
    gen = (world.quotas_changed, world.class_gen)
    cached = world.quota_cache.get("")
    if cached is not None and cached[0] == gen and isinstance(cached[1], tuple):
        return cached[1]
    out = tuple(
        p for ns in sorted(world.quotas_by_namespace) for p in of_namespace(world, ns).problems
    )
    world.quota_cache[""] = (gen, out)
    return out


def condition(world: World, class_name: str, resource: str, now: datetime) -> Condition:
    """The class's QuotasValid condition: False naming each malformed quota entry on it."""
    mine = [p for p in problems(world) if p.class_name == class_name]
    if not mine:
        return Condition(
            type=CONDITION,
            status="True",
            reason="WellFormed",
            message=f"every ResourceQuota entry on {resource} is a whole number of GPUs",
            last_transition_time=now,
        )
    shown = "; ".join(f"{p.quota.key}: {p.message}" for p in mine[:5])
    more = f"; and {len(mine) - 5} more" if len(mine) > 5 else ""
    return Condition(
        type=CONDITION,
        status="False",
        reason="MalformedQuota",
        message=shown + more,
        last_transition_time=now,
    )


def notes(world: World, said: dict[str, str]) -> list[Note]:
    """An Event on each quota with a malformed entry, once per message (`said` remembers
    what was told, per quota; a quota fixed or gone is forgotten)."""
    out: list[Note] = []
    now: dict[str, tuple[ResourceQuota, list[str]]] = {}
    for p in problems(world):
        now.setdefault(p.quota.key, (p.quota, []))[1].append(p.message)
    for key in [k for k in said if k not in now]:
        del said[key]
    for key, (q, messages) in sorted(now.items()):
        message = f"gpu-binder cannot read {'; '.join(messages)}"
        if said.get(key) == message:
            continue
        said[key] = message
        meta = q.metadata
        out.append(
            Note(
                "ResourceQuota",
                meta.namespace,
                meta.name,
                meta.uid,
                "GPUQuotaMalformed",
                message,
                "Warning",
            )
        )
    return out
