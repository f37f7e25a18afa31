"""`kubectl gpu why NS/NAME`: why a VM holds what it holds, in one paragraph.

Read from the VM's state (its order, its set, its VMI, the set's node) and the binder's
last Events about it, which carry the binder's own reason in words: why it is not bound
(GPUUnplaceable), why its start was refused (GPURefused), why it was moved (GPUMove) or
could not be (GPUMoveBlocked), why its GPUs were released (GPUReleased).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpu_binder.api.kinds import Event
from gpu_binder.api.types import Phase
from gpu_binder.kubectl.output import Format, Printer, age
from gpu_binder.kubectl.status import node_state
from gpu_binder.kubectl.vm import VMFacts, _event_at, order_words

# The binder's reasons that explain a VM's present, most telling last in the paragraph.
EXPLAINING = (
    "GPUUnplaceable",
    "GPURefused",
    "GPUMove",
    "GPUMoveBlocked",
    "GPURebind",
    "GPURebindBlocked",
    "GPUMadeRoom",
    "GPUReleased",
    "GPUUnmanaged",
    "GPUAdopted",
    "GPULost",
)


def _last(events: list[Event], *reasons: str) -> Event | None:
    found = [e for e in events if e.reason in reasons]
    return found[-1] if found else None


def _said(e: Event, now: datetime) -> str:
    return f'{e.reason} {age(_event_at(e), now)} ago: "{e.note}"'


def reasons(f: VMFacts, now: datetime) -> list[str]:
    """The sentences of the paragraph, in reading order."""
    if f.vm is None and f.vmi is None:
        return [f"There is no VirtualMachine or VirtualMachineInstance {f.key}."]
    order = f.order()
    wanted = sum(order.values())
    out = [f"{f.key} is {f.running_state()} and orders {order_words(order)}."]
    if not wanted:
        return [*out[:1], "It orders no GPUs of a GPUClass, so gpu-binder leaves it alone."]
    held = len(f.devices) or len(f.device_names)
    live = f.vmi is not None and f.vmi.phase not in ("Succeeded", "Failed")
    running = live and f.vmi is not None and f.vmi.phase == "Running"
    node = f.node
    if held >= wanted:
        if running:
            out.append(f"It holds its {held} GPU(s) on {node}, in use by its running VMI.")
        elif live:
            out.append(f"It holds its {held} GPU(s) on {node}; its VMI is {f.vmi.phase}.")  # type: ignore[union-attr]
        else:
            out.append(f"It holds its {held} GPU(s) on {node}, reserved while it is stopped.")
            out.extend(_release_after(f))
    elif held:
        out.append(f"It holds {held} of them on {node}; the rest are not bound yet.")
    else:
        out.append("It holds none.")
    out.extend(_node_words(f, live))
    lost = [d for d in f.devices if d.status.phase == Phase.LOST]
    for d in lost:
        out.append(
            f"GPU {d.metadata.name} of its set is Lost ({d.status.lost_reason or 'no reason'}):"
            + (
                " it stays with the VMI while it runs; at the next stop the set gets a healthy"
                " GPU on the same node, or moves whole."
                if live
                else " the set gets a healthy GPU on the same node, or moves whole."
            )
        )
    if held < wanted:
        out.extend(_why_unbound(f, order, live, now))
    moved = _last(f.events, "GPUMove", "GPURebind", "GPUMadeRoom")
    if moved is not None:
        out.append(f"Last moved: {_said(moved, now)}.")
    return out


def _release_after(f: VMFacts) -> list[str]:
    classes = {d.status.class_name for d in f.devices}
    for name in sorted(classes):
        c = f.snap.classes.get(name)
        after = c.spec.reservation.release_after_stopped if c is not None else None
        if after:
            return [f"Class {name} releases a stopped VM's GPUs {after} after it stopped."]
    return []


def _node_words(f: VMFacts, live: bool) -> list[str]:
    if not f.devices or f.snap.nodes is None:
        return []
    nodes = {d.spec.node_name for d in f.devices}
    out = []
    for name in sorted(nodes):
        state = node_state(f.snap.nodes.get(name))
        if state == "Ready":
            continue
        if live:
            out.append(
                f"Its node {name} is {state}, but the set stays while its VMI runs: a VM with "
                "passthrough GPUs cannot live-migrate; it moves once the VM stops."
            )
        else:
            out.append(f"Its node {name} is {state}: the binder moves its set to a usable node.")
    return out


def _why_unbound(f: VMFacts, order: dict[str, int], live: bool, now: datetime) -> list[str]:
    out = []
    released = _last(f.events, "GPUReleased")
    if not live and f.vm is not None and not f.vm.running:
        out.append(
            "A stopped VM holds GPUs only within its class's releaseAfterStopped; they are "
            "bound again when it starts."
        )
        if released is not None:
            out.append(f"Released: {_said(released, now)}.")
        return out
    for name, n in sorted(order.items()):
        c = f.snap.classes.get(name)
        if c is not None and c.status.largest_free_set < n:
            out.append(
                f"No node has {n} free {name} GPUs together now (the largest free set is "
                f"{c.status.largest_free_set}); the order waits, oldest first, and is bound as "
                "soon as one has."
            )
    unplaceable = _last(f.events, "GPUUnplaceable")
    refused = _last(f.events, "GPURefused")
    for e in sorted((x for x in (unplaceable, refused) if x), key=lambda x: x.event_time):
        verb = "The binder said" if e.reason == "GPUUnplaceable" else "Its start was refused"
        out.append(f"{verb}: {_said(e, now)}.")
    if refused is not None:
        out.append("KubeVirt retries the start; it is admitted once the set is complete.")
    blocked = _last(f.events, "GPUMoveBlocked", "GPURebindBlocked", "GPUUnmanaged")
    if blocked is not None:
        out.append(f"Also: {_said(blocked, now)}.")
    return out


def show(f: VMFacts, printer: Printer, fmt: Format, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    said = reasons(f, now)
    if fmt in ("json", "yaml"):
        data: dict[str, Any] = {"vm": f.key, "why": " ".join(said), "sentences": said}
        printer.data(data, fmt)
        return
    printer.line(" ".join(said))
