"""Derived state: class status, and node status (Lost devices, degraded nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gpu_binder.api.meta import Condition, set_condition
from gpu_binder.api.slots import device_slot
from gpu_binder.api.types import GPUClass, GPUDevice, Phase
from gpu_binder.binder import ops, quota
from gpu_binder.binder.context import Context
from gpu_binder.binder.kubevirtcr import list_created, served_twice
from gpu_binder.binder.plan import Note
from gpu_binder.binder.queries import largest_free_set, matching_classes, reported_degraded
from gpu_binder.binder.writes import NodeCondition, Status


@dataclass
class StatusMemory:
    # When a node first served fewer units than it holds healthy devices (Memory.degraded
    # holds those past degradedGrace).
    degraded_since: dict[str, datetime] = field(default_factory=dict)
    # Per node: the shortfall last computed, with the node object and device generation
    # it was computed from, so an unchanged node costs a lookup.
    shortfalls: dict[str, tuple[object, tuple[int | None, int], set[str], bool]] = field(
        default_factory=dict
    )
    # When a device was first seen Unhealthy, and a node first seen gone.
    unhealthy_since: dict[str, datetime] = field(default_factory=dict)
    node_gone_since: dict[str, datetime] = field(default_factory=dict)
    # The malformed-quota Event last told per ResourceQuota ("namespace/name").
    quota_said: dict[str, str] = field(default_factory=dict)
    # Per Lost device its cause held for: the device and node objects it was judged on,
    # and whether its plugin fell short of it. A Lost device's cause reads nothing else
    # (no grace once Lost), and Lost devices add up through a node outage: one unchanged
    # costs a lookup.
    still_lost: dict[str, tuple[GPUDevice, object, bool]] = field(default_factory=dict)


def class_status(ctx: Context) -> None:
    for told in quota.notes(ctx.world, ctx.memory.of(StatusMemory).quota_said):
        ctx.plan.note(told)
    counts = ctx.world.devices.counts
    # A device matching two classes is an error shown on both classes (DESIGN §1).
    ambiguous: dict[str, list[str]] = {}
    rivals: dict[str, set[str]] = {}
    for device in sorted(ctx.world.devices.ambiguous):
        found = matching_classes(ctx.world, ctx.world.devices.by_name[device])
        names = {c.metadata.name for c in found}
        for class_name in names:
            ambiguous.setdefault(class_name, []).append(device)
            rivals.setdefault(class_name, set()).update(names - {class_name})
    twice = served_twice(ctx.world, ctx.config)
    why = list_created(ctx.world, ctx.config)
    created = (
        Condition(
            type="KubeVirtHostDevices",
            status="True",
            reason="ListCreated",
            message=why,
            last_transition_time=ctx.now,
        )
        if why
        else None
    )
    for name in sorted(ctx.world.classes):
        cls = ctx.world.classes[name]
        c = counts.get(name, {})
        ready = Condition(
            type="Ready",
            status="True",
            reason="Serving",
            message="devices are classified",
            last_transition_time=ctx.now,
        )
        serving = ctx.world.class_by_resource.get(cls.spec.resource_name)
        note: Note | None = None
        if serving is not None and serving.metadata.name != name:
            ready = ready.model_copy(
                update={
                    "status": "False",
                    "reason": "DuplicateResourceName",
                    "message": f"resourceName {cls.spec.resource_name} is served by class "
                    f"{serving.metadata.name}, the older; give this class a resourceName "
                    "of its own",
                }
            )
        elif name in twice:
            ready = ready.model_copy(
                update={"status": "False", "reason": "ServedByKubeVirt", "message": twice[name]}
            )
        elif name in ambiguous:
            shown = ambiguous[name]
            more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
            ready = ready.model_copy(
                update={
                    "status": "False",
                    "reason": "AmbiguousMatch",
                    "message": f"{len(shown)} device(s) also match class "
                    f"{', '.join(sorted(rivals[name]))} ({', '.join(shown[:3])}{more}) and "
                    "serve neither; make spec.match of the classes distinct",
                }
            )
        conditions = set_condition(cls.status.conditions, ready)
        conditions = set_condition(
            conditions, quota.condition(ctx.world, name, cls.spec.resource_name, ctx.now)
        )
        if created:
            conditions = set_condition(conditions, created)
        was = next((c for c in cls.status.conditions if c.type == "Ready"), None)
        if ready.reason == "ServedByKubeVirt" and (was is None or was.reason != ready.reason):
            note = Note(
                "GPUClass", "", name, cls.metadata.uid, "GPUClassRefused", ready.message, "Warning"
            )
        status = cls.status.model_copy(
            update={
                "devices": sum(c.values()),
                "available": c.get(Phase.AVAILABLE, 0),
                "bound": c.get(Phase.BOUND, 0),
                "attached": c.get(Phase.ATTACHED, 0),
                "lost": c.get(Phase.LOST, 0),
                "cleaning": c.get(Phase.CLEANING, 0),
                "largest_free_set": largest_free_set(ctx.world, ctx.memory.degraded, name),
                "conditions": conditions,
                "observed_generation": cls.metadata.generation,
            }
        )
        if status != cls.status:
            ctx.plan.write(Status(cls.model_copy(update={"status": status})), note)


def lost_cause(ctx: Context, d: GPUDevice, shortfall: set[str]) -> str:
    """Why d is Lost now, or "" when nothing says so."""
    m, grace = ctx.memory.of(StatusMemory), ctx.config.lost_grace
    # A device already Lost stays Lost while a cause holds: these clocks live in memory,
    # and a restarted binder must not recover it only because they started anew.
    lost = d.status.phase == Phase.LOST
    node = ctx.world.nodes.get(d.spec.node_name)
    if node is None:
        gone = m.node_gone_since.setdefault(d.spec.node_name, ctx.now)
        if lost or ctx.now - gone >= grace:
            return f"node {d.spec.node_name} is gone"
    else:
        m.node_gone_since.pop(d.spec.node_name, None)
        if not node.ready and (lost or ctx.now - (node.ready_since or ctx.now) >= grace):
            return f"node {d.spec.node_name} is not Ready"
    if d.spec.health != "Healthy":
        since = m.unhealthy_since.setdefault(d.metadata.name, ctx.now)
        if lost or ctx.now - since >= grace:
            return f"unhealthy: {d.spec.health_message or 'reported by the node agent'}"
    else:
        m.unhealthy_since.pop(d.metadata.name, None)
    if d.metadata.name in shortfall:
        return f"the device plugin on {d.spec.node_name} does not serve it"
    return ""


def node_status(ctx: Context) -> None:
    shortfall = _degraded(ctx)
    world = ctx.world
    suspects: set[str] = set(world.devices.lost) | world.devices.unhealthy | shortfall
    for node_name in list(world.down_nodes):
        node = world.nodes.get(node_name)
        names = world.devices.by_node.get(node_name)
        if names and (node is None or not node.ready):
            suspects.update(names)
        else:
            world.down_nodes.discard(node_name)  # up again, or nothing of ours left on it
    still_lost = ctx.memory.of(StatusMemory).still_lost
    for name in sorted(suspects):
        d = world.devices.get(name)
        if d is None or d.metadata.deletion_timestamp is not None:
            continue
        node, short = world.nodes.get(d.spec.node_name), name in shortfall
        judged = still_lost.get(name)
        if judged is not None and judged[0] is d and judged[1] is node and judged[2] == short:
            continue  # Lost, and nothing its cause reads has changed
        cause = lost_cause(ctx, d, shortfall)
        if cause and d.status.phase != Phase.LOST:
            _lose(ctx, d, cause)
        elif not cause and d.status.phase == Phase.LOST:
            _recover(ctx, d)
        if cause and d.status.phase == Phase.LOST:
            still_lost[name] = (d, node, short)
        else:
            still_lost.pop(name, None)


def _lose(ctx: Context, d: GPUDevice, cause: str) -> None:
    status = d.status.model_copy(
        update={"phase": Phase.LOST, "lost_since": ctx.now, "lost_reason": cause}
    )
    ctx.plan.device_status(
        d.model_copy(update={"status": status}), ops.device_note(d, "GPULost", cause, warning=True)
    )


def _recover(ctx: Context, d: GPUDevice) -> None:
    """A Lost device whose cause cleared is cleaned before anyone else may bind it."""
    s = d.status
    if s.binding is not None:
        phase = Phase.ATTACHED if s.attachment is not None else Phase.BOUND
        update: dict[str, object] = {"phase": phase}
    else:
        cls = ctx.world.classes.get(s.class_name)
        clean = cls is None or cls.spec.cleaning != "None"
        update = {"phase": Phase.CLEANING if clean else Phase.AVAILABLE, "released_at": ctx.now}
    update.update({"lost_since": None, "lost_reason": ""})
    status = s.model_copy(update=update)
    ctx.plan.device_status(
        d.model_copy(update={"status": status}),
        ops.device_note(d, "GPURecovered", "the cause of its loss cleared"),
    )


def _degraded(ctx: Context) -> set[str]:
    """Devices beyond what each node's device plugin serves, once past degradedGrace."""
    world, m, degraded = ctx.world, ctx.memory.of(StatusMemory), ctx.memory.degraded
    out: set[str] = set()
    by_node = world.devices.by_node
    if ctx.scope.exhaustive:
        nodes = sorted(by_node)
    else:
        # Unchanged nodes keep their verdict; those in or near a degraded state are judged
        # again, as their grace runs.
        watch = ctx.scope.changed_nodes(world) | set(m.degraded_since) | degraded
        nodes = sorted(n for n in watch if n in by_node)
    for node_name in nodes:
        names = by_node[node_name]
        node = world.nodes.get(node_name)
        if node is None or not node.ready:
            continue
        cached = m.shortfalls.get(node_name)
        gen = (world.devices.node_gen.get(node_name), world.class_gen)
        if cached is not None and cached[0] is node and cached[1] == gen:
            short, reported = cached[2], cached[3]
        else:
            devs = [world.devices.by_name[n] for n in names]
            short = _shortfall(ctx, node.allocatable, devs)
            # The condition this binder set survives a restart that its memory does not.
            reported = reported_degraded(node)
            m.shortfalls[node_name] = (node, gen, short, reported)
        if not short:
            m.degraded_since.pop(node_name, None)
            if node_name in degraded or reported:
                degraded.discard(node_name)
                world.devices.touch_node(node_name)
                world.devices.capacity_gen += 1
                _node_condition(ctx, node_name, "False", "Serving", "all devices are served")
            continue
        if reported and node_name not in m.degraded_since:
            # Degraded past the grace before a restart: stay so, rather than recover its
            # Lost devices and take new sets until the grace has run again.
            m.degraded_since[node_name] = ctx.now - ctx.config.degraded_grace
            degraded.add(node_name)
            world.devices.touch_node(node_name)  # its sets may have to move now
            world.devices.capacity_gen += 1
        since = m.degraded_since.setdefault(node_name, ctx.now)
        if ctx.now - since < ctx.config.degraded_grace:
            continue
        if node_name not in degraded:
            degraded.add(node_name)
            world.devices.touch_node(node_name)  # its sets may have to move now
            _node_condition(
                ctx,
                node_name,
                "True",
                "PluginShortfall",
                f"the device plugin serves {len(short)} device(s) too few",
            )
        out.update(short)
    return out


def _shortfall(ctx: Context, allocatable: dict[str, int], devs: list[GPUDevice]) -> set[str]:
    by_class: dict[str, list[GPUDevice]] = {}
    for d in devs:
        if d.spec.health == "Healthy" and d.status.class_name:
            by_class.setdefault(d.status.class_name, []).append(d)
    out: set[str] = set()
    for class_name, ds in by_class.items():
        cls: GPUClass | None = ctx.world.classes.get(class_name)
        if cls is None:
            continue
        if cls.spec.pinning == "Device":
            out.update(d.metadata.name for d in ds if allocatable.get(device_slot(d), 0) < 1)
            continue
        served = allocatable.get(cls.spec.resource_name, 0)
        if served < len(ds):
            # The shortfall is taken from unattached devices: running tenants stay.
            spare = sorted(ds, key=lambda d: (d.status.attachment is not None, -(d.spec.slot or 0)))
            out.update(d.metadata.name for d in spare[: len(ds) - served])
    return out


def _node_condition(ctx: Context, node: str, status: str, reason: str, message: str) -> None:
    n = ctx.world.nodes.get(node)
    if n is None:
        return
    cond = Condition(
        type="GPUDegraded",
        status=status,
        reason=reason,
        message=message,
        last_transition_time=ctx.now,
    )
    ctx.plan.write(NodeCondition(node, cond))
