"""`kubectl gpu drain NODE`: what a drain of the node would do to its GPU VMs, before it
is done. Nothing is written.

- **Stopped sets** (bound, no live VMI) move when their node is cordoned. Where each goes
  is what the binder itself would decide: its own pass runs here, in memory, on a copy of
  the cluster with the node cordoned (a new leader's first pass, default settings), and
  the moves it makes, or the Events it would write instead, are reported.
- **Running VMIs** keep their GPUs: a VMI with passthrough GPUs cannot live-migrate
  (KubeVirt marks it LiveMigratable=False, HostDeviceNotLiveMigratable). What the drain's
  eviction of its launcher pod does follows its evictionStrategy (the VMI's, else the
  KubeVirt CR's, else None), as KubeVirt's pod-eviction-admitter.go decides:
  None and LiveMigrateIfPossible let the eviction shut the guest down; LiveMigrate refuses
  it, so the drain waits forever; External hands it to an outside controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.text import Text

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.kubevirt import Node, VirtualMachineInstance
from gpu_binder.api.types import GPUDevice
from gpu_binder.binder import PASS_KEY, Config, Note, Reconciler
from gpu_binder.cache.world import World
from gpu_binder.client.errors import Forbidden
from gpu_binder.client.interface import Client, WatchEvent
from gpu_binder.kubectl import snapshot
from gpu_binder.kubectl.output import Format, Printer, Table
from gpu_binder.kubectl.snapshot import Snapshot
from gpu_binder.sim.memory import MemoryClient

DEFAULT_EVICTION_STRATEGY = "None"  # KubeVirt's configuration.go defaultEvictionStrategy


@dataclass
class Move:
    vm: str
    gpus: int
    to: str  # "" when it stays
    why: str = ""


@dataclass
class Running:
    vmi: str
    gpus: int
    strategy: str
    outcome: str
    blocks: bool


@dataclass
class DrainPlan:
    node: str
    moves: list[Move] = field(default_factory=list)
    running: list[Running] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        return any(r.blocks for r in self.running)


async def gather(client: Client, node: str) -> tuple[Snapshot, str]:
    snap = await snapshot.read(client, None, requests=False)
    try:
        kubevirts = (await client.list(KubeVirt)).items
    except Forbidden:
        kubevirts = []
    default = DEFAULT_EVICTION_STRATEGY
    for kv in kubevirts:
        config = (kv.raw.get("spec") or {}).get("configuration") or {}
        default = str(config.get("evictionStrategy") or default)
    return snap, default


def _cordoned(node: Node) -> Node:
    raw = dict(node.raw)
    raw["spec"] = {**(raw.get("spec") or {}), "unschedulable": True}
    return Node.from_dict(raw)


async def _binders_pass(
    snap: Snapshot, node: str, now: datetime
) -> tuple[list[GPUDevice], list[Note]]:
    """The devices after the binder's pass over a copy of the cluster with node cordoned."""
    client = MemoryClient()
    world = World()
    objects: list[Any] = [*snap.classes.values(), *(snap.devices or ())]
    for n in (snap.nodes or {}).values():
        objects.append(_cordoned(n) if n.name == node else n)
    objects += [*snap.vms.values(), *snap.vmis.values()]
    for obj in objects:
        world.apply(WatchEvent("ADDED", client.put(obj)))
    # One pass shows every move and bind the binder would make (no orders_per_pass).
    binder = Reconciler(client, world, Config(orders_per_pass=0), clock=lambda: now)
    await binder.reconcile(PASS_KEY, full=True)
    notes: list[Note] = list(getattr(binder.recorder, "recorded", []))
    return client.objects(GPUDevice), notes


def _strategy(vmi: VirtualMachineInstance, default: str) -> str:
    return str((vmi.raw.get("spec") or {}).get("evictionStrategy") or default)


def _running_outcome(vmi: VirtualMachineInstance, strategy: str) -> tuple[str, bool]:
    if strategy == "LiveMigrate":
        return (
            "blocks the drain: KubeVirt refuses to evict a VMI that cannot live-migrate "
            f"(passthrough GPUs); stop it (virtctl stop -n {vmi.metadata.namespace} "
            f"{vmi.vm_name or vmi.metadata.name}) and the drain goes on",
            True,
        )
    if strategy == "External":
        return (
            "blocks the drain until an external controller acts on the VMI's "
            "evacuationNodeName (it cannot live-migrate: passthrough GPUs)",
            True,
        )
    then = (
        "its VM starts it again elsewhere, its set moving with the restart"
        if vmi.vm_name
        else "it is gone, and its GPUs are released"
    )
    return (
        "evicted: the guest shuts down (passthrough GPUs cannot live-migrate); " + then,
        False,
    )


async def plan(client: Client, node: str, now: datetime | None = None) -> DrainPlan:
    snap, default = await gather(client, node)
    return await predict(snap, node, default, now or datetime.now(UTC))


def _sets_on(snap: Snapshot, node: str) -> dict[str, list[GPUDevice]]:
    sets: dict[str, list[GPUDevice]] = {}
    for d in snap.devices_on(node):
        if d.status.binding is not None:
            sets.setdefault(d.status.binding.vm.key, []).append(d)
    return sets


async def predict(snap: Snapshot, node: str, default: str, now: datetime) -> DrainPlan:
    """What a drain of node does, from a snapshot of the cluster."""
    out = DrainPlan(node)
    missing = [k for k in ("gpudevices", "nodes", "virtualmachines") if k in snap.forbidden]
    if missing:
        # Said, not guessed: a prediction from part of the cluster would mislead.
        out.notes.append(f"cannot read {', '.join(missing)} with these credentials")
        return out
    if snap.nodes is not None and node not in snap.nodes:
        out.notes.append(f"there is no node {node}")
        return out
    sets = _sets_on(snap, node)
    live = {v.order_key: v for v in snap.vmis.values() if v.live}
    stopped = sorted(k for k in sets if k not in live)
    if stopped:
        after, notes = await _binders_pass(snap, node, now)
        where: dict[str, set[str]] = {}
        for d in after:
            if d.status.binding is not None:
                where.setdefault(d.status.binding.vm.key, set()).add(d.spec.node_name)
        said = {f"{n.namespace}/{n.name}": n for n in notes if n.kind == "VirtualMachine"}
        for key in stopped:
            now_on = where.get(key, set())
            if now_on and node not in now_on:
                out.moves.append(Move(key, len(sets[key]), ",".join(sorted(now_on))))
            else:
                note = said.get(key)
                why = note.message if note is not None else "no usable node fits the set"
                out.moves.append(Move(key, len(sets[key]), "", why))
    for key, vmi in sorted(live.items()):
        held = len(sets.get(key, ()))
        if vmi.node_name != node and not held:
            continue
        strategy = _strategy(vmi, default)
        outcome, blocks = _running_outcome(vmi, strategy)
        out.running.append(Running(vmi.key, held, strategy, outcome, blocks))
    return out


def to_data(p: DrainPlan) -> dict[str, Any]:
    return {
        "node": p.node,
        "blocked": p.blocked,
        "stoppedSets": [
            {"vm": m.vm, "gpus": m.gpus, "to": m.to or None, "why": m.why or None} for m in p.moves
        ],
        "runningVMIs": [
            {
                "vmi": r.vmi,
                "gpus": r.gpus,
                "evictionStrategy": r.strategy,
                "outcome": r.outcome,
                "blocksDrain": r.blocks,
            }
            for r in p.running
        ],
        "notes": p.notes,
    }


def show(p: DrainPlan, printer: Printer, fmt: Format) -> None:
    if fmt in ("json", "yaml"):
        printer.data(to_data(p), fmt)
        return
    for note in p.notes:
        printer.line(f"{p.node}: {note}")
    if p.notes:
        return
    if not p.moves and not p.running:
        printer.line(f"No GPU VM has GPUs on {p.node}: a drain disturbs none.")
        return
    if p.moves:
        printer.line(f"Stopped VMs' sets on {p.node} (moved by the binder once it is cordoned):")
        moves = Table(["vm", "gpus", "moves to"])
        for m in p.moves:
            moves.add(m.vm, str(m.gpus), m.to or f"stays: {m.why}")
        printer.text(moves.render())
    if p.running:
        if p.moves:
            printer.line()
        printer.line(f"Running VMIs with GPUs on {p.node} (their GPUs stay until they stop):")
        running = Table(["vmi", "gpus", "eviction strategy", "what the drain does"])
        for r in p.running:
            outcome = r.outcome if printer.plain or not r.blocks else Text(r.outcome, style="red")
            running.add(r.vmi, str(r.gpus), r.strategy, outcome)
        printer.text(running.render())
    printer.line()
    verdict = "blocks" if p.blocked else "can proceed"
    printer.line(f"kubectl drain {p.node} {verdict}.")
