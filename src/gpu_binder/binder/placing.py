"""Placing an order on the world: its options, the nodes that fit them, the class policy.

This is the binder's one road to `gpu_binder.placement` (`place` below): every step
that binds — orders, requests, moves, rebinds, defragmentation — and the replay, which
measures exactly this.

- **Options**: an order accepting several classes (placement.options) stands for one
  concrete order per class.
- **Fit**: a node fits an option if its free devices of each class suffice and its free
  CPU and memory (allocatable minus what the VMs bound there ask) hold the VM's request —
  none more where the VM already holds devices.
- **Score**: the policy of the order's own class. LeastStranded weighs each option's
  class scarcity into one ranking of every (option, node); Pack and Spread take the
  least claimed class that fits, then their node.
- **Scale**: nodes in one free state score alike, so for a one-class option each state
  of the class is scored once (cache.freestates) and stands for its first usable node.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from gpu_binder.api.types import GPUDevice
from gpu_binder.binder.context import Context
from gpu_binder.cache.resources import Amount
from gpu_binder.placement import (
    LEAST_STRANDED,
    POLICIES,
    Candidate,
    Fit,
    Outlook,
    Placement,
    Ranked,
    first_placement,
    fit,
    hedged,
    main_class,
    options,
    pool_pressures,
    pressures,
    rank_key,
    whole_risks,
)


def class_policy(ctx: Context, class_name: str) -> str:
    cls = ctx.world.classes.get(class_name)
    return cls.spec.placement.policy if cls is not None else LEAST_STRANDED


def topology_of(ctx: Context, class_name: str) -> str:
    cls = ctx.world.classes.get(class_name)
    return cls.spec.placement.topology if cls is not None else "Node"


def usable(ctx: Context, node: str, exclude: str | None = None) -> bool:
    """A node new devices may be bound on: not excluded, not degraded, Ready, uncordoned."""
    return node != exclude and node not in ctx.memory.degraded and ctx.world.node_usable(node)


def candidates(
    ctx: Context, order: Mapping[str, int], only: str | None = None, exclude: str | None = None
) -> list[Candidate]:
    """Nodes that could take the order: usable, holding free devices of its main class."""
    devices = ctx.world.devices
    free = devices.free.get(main_class(order), {})
    nodes = [only] if only is not None else list(free)
    out: list[Candidate] = []
    for node in nodes:
        if not usable(ctx, node, exclude):
            continue
        counts = {c: len(devices.free_on(c, node)) for c in order}
        cpu, memory = devices.resources.free(node)
        out.append(Candidate(node, counts, cpu, memory, _shape(ctx, main_class(order), node)))
    return out


def outlook(ctx: Context, opts: Sequence[Mapping[str, int]]) -> Outlook:
    """What the policy knows beyond a node: the mix, the largest node size of each class
    the options use, class and pool scarcity and, when there is a class to choose,
    whole-node risk.

    Pools are priced for an order of one class too: its class's price is the same on
    every node, but its pools' are not, and unpriced it broke the only nodes a known
    claim of its class fits (sweep draw 4005, docs/PLACEMENT.md).

    Whole-node risk is priced above the safest option class's: whether to break a whole
    node at all is the stranding term's call (the mix's big orders fit a whole node, not a
    broken one); this only steers which class's whole node an order with a choice breaks.
    Priced outright it outweighed stranding as the cluster filled and left small orders
    stranded on cramped nodes instead (docs/PLACEMENT.md).
    """
    world, devices = ctx.world, ctx.world.devices
    classes = {c for o in opts for c in o}
    whole = {c: devices.whole(c) for c in classes}
    capacity = {c: sum(n.values()) for c, n in devices.counts.items() if c}
    free = {c: devices.free_count.get(c, 0) for c in capacity}
    world.mix.set_shapes(devices.shapes())
    pressure = pressures(world.mix, capacity, free)
    # Orders every class holds may still claim some pools (Mix.pools).
    claimed = any(pressure.values()) or bool(world.mix.by_pools)
    pools = pool_pressures(world.mix, devices.pool_free) if claimed else {}
    excess: dict[str, float] = {}
    if len(opts) > 1 and world.mix.by_whole:
        sizes = {c: devices.whole(c) for c in capacity}
        risks = whole_risks(world.mix, free, _whole_free(ctx, sizes), sizes)
        mine = {c: risks[c] for c in classes if c in risks}
        safest = min(mine.values(), default=0.0)
        excess = {c: r - safest for c, r in mine.items()}
    return Outlook(world.mix, pressure, whole, excess, pools)


def _whole_free(ctx: Context, sizes: Mapping[str, int]) -> dict[str, int]:
    """Per class, the GPUs on its nodes of the largest size with every GPU free."""
    groups = ctx.world.devices.states.groups
    return {
        c: sum(size * len(nodes) for state, nodes in groups.get(c, {}).items() if state[0] >= size)
        for c, size in sizes.items()
    }


def place(
    ctx: Context,
    order: Mapping[str, int],
    only: str | None = None,
    exclude: str | None = None,
    *,
    key: str | None = None,
    alternatives: Sequence[str] = (),
) -> Placement | None:
    """Where the order (of `key`, whose CPU and memory it needs) goes, or None."""
    if not order:
        return None
    world = ctx.world
    opts = options(order, [c for c in alternatives if c in world.classes])
    policy = class_policy(ctx, main_class(opts[0]))
    score = POLICIES[policy]
    view = outlook(ctx, opts)
    devices = world.devices

    def load_free(class_name: str, node: str) -> list[GPUDevice]:
        return [devices.by_name[n] for n in devices.free_on(class_name, node)]

    def load_domains(class_name: str, node: str) -> dict[str, int]:
        return devices.domain_sizes(class_name, node, topology_of(ctx, class_name))

    def ranked(group: Sequence[Mapping[str, int]]) -> list[Ranked]:
        entries = [e for o in group for e in _fits(ctx, o, only, exclude, key)]
        if policy == LEAST_STRANDED:
            return hedged(entries, score, view)
        entries.sort(key=lambda e: rank_key(e[0], score, view))
        return entries

    def topology(class_name: str) -> str:
        return topology_of(ctx, class_name)

    if len(opts) > 1 and policy != LEAST_STRANDED:
        # Pack and Spread score nodes, not classes: the least claimed class that fits.
        def claimed(o: Mapping[str, int]) -> float:
            return sum(n * view.pressure.get(c, 0.0) for c, n in o.items()) / sum(o.values())

        for o in sorted(opts, key=claimed):
            placed = first_placement(ranked([o]), topology, load_free, load_domains)
            if placed is not None:
                return placed
        return None
    return first_placement(ranked(opts), topology, load_free, load_domains)


def _fits(
    ctx: Context,
    order: Mapping[str, int],
    only: str | None,
    exclude: str | None,
    key: str | None,
) -> Iterator[Ranked]:
    resources = ctx.world.devices.resources
    request: Amount = resources.request(key) if key is not None else (0, 0)
    if only is None and len(order) == 1:
        yield from _grouped_fits(ctx, order, exclude, request)
        return
    for c in candidates(ctx, order, only, exclude):
        # Where the VM holds devices already, its CPU and memory are counted there.
        cpu, memory = (0, 0) if key is not None and resources.holds(key, c.node) else request
        f = fit(order, c, cpu, memory)
        if f is not None:
            yield f, order


def _grouped_fits(
    ctx: Context, order: Mapping[str, int], exclude: str | None, request: Amount
) -> Iterator[Ranked]:
    """One fit per free state of the class that holds the order, on its first usable node
    (every usable node when topology may refuse one)."""
    [(class_name, count)] = order.items()
    cpu, memory = request
    every = topology_of(ctx, class_name) != "Node"
    for (gpus, cpu_free, memory_free), members in ctx.world.devices.states.groups.get(
        class_name, {}
    ).items():
        if gpus < count or cpu_free < cpu or memory_free < memory:
            continue
        for node in members:
            if usable(ctx, node, exclude):
                shape = _shape(ctx, class_name, node)
                f = Fit(
                    node, gpus - count, gpus, class_name, cpu_free, memory_free, cpu, memory, shape
                )
                yield f, order
                if not every:
                    break


def _shape(ctx: Context, class_name: str, node: str) -> tuple[int, int, int]:
    """The node's pool for the class, less the class: its devices there, CPU, memory."""
    _, devices, cpu, memory = ctx.world.devices.pool_of(class_name, node)
    return devices, cpu, memory


def shortfall(ctx: Context, order: Mapping[str, int], key: str | None = None) -> str:
    """Why an order does not fit, in words a tenant understands."""
    devices = ctx.world.devices
    cpu, memory = devices.resources.request(key) if key is not None else (0, 0)
    parts = []
    cramped = ""
    for class_name, count in sorted(order.items()):
        best_node, best = "", 0
        for node, names in devices.free.get(class_name, {}).items():
            if not usable(ctx, node):
                continue
            if len(names) > best or (len(names) == best and node < best_node):
                best_node, best = node, len(names)
            if len(names) >= count and not cramped:
                cpu_free, memory_free = devices.resources.free(node)
                if cpu_free < cpu or memory_free < memory:
                    cramped = node
        where = f" on {best_node}" if best else ""
        parts.append(f"{count} × {class_name} requested; the largest free set is {best}{where}")
    if len(order) > 1:
        parts.append("all of them must be on one node")
    if cramped:
        parts.append(
            f"nodes with enough free GPUs (such as {cramped}) lack the CPU or memory the VM "
            f"asks for ({cpu / 1000:g} CPU, {memory / 2**30:g} GiB)"
        )
    return "; ".join(parts)
