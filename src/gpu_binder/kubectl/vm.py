"""`kubectl gpu vm NS/NAME`: one VM's GPUs — what it orders, its set, the node, each GPU's
phase — and the history of the binder's decisions about it, from Events, newest last."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.text import Text

from gpu_binder.api.instancetype import ControllerRevision
from gpu_binder.api.kinds import Event
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance, set_to_start
from gpu_binder.api.types import DEVICES_ANNOTATION, GPUClass, GPUDevice
from gpu_binder.cache.vmiorder import revision_key, vm_entries
from gpu_binder.client.interface import Client
from gpu_binder.display.slots import COLOURS, by_slot
from gpu_binder.kubectl import snapshot
from gpu_binder.kubectl.output import Format, Printer, Table, age
from gpu_binder.kubectl.snapshot import Snapshot

ORDER_KINDS = ("VirtualMachine", "VirtualMachineInstance")


@dataclass
class VMFacts:
    namespace: str
    name: str
    vm: VirtualMachine | None
    vmi: VirtualMachineInstance | None
    snap: Snapshot
    # The GPUs bound to it: from the GPUDevices when readable, else as named by the
    # annotation the binder keeps on the VM (devices only, no phases).
    devices: list[GPUDevice] = field(default_factory=list)
    device_names: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # The instancetype revision KubeVirt recorded for the VM, by key, when it names one.
    revisions: dict[str, ControllerRevision] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def order(self) -> dict[str, int]:
        """GPUs ordered per class: the entries naming a class's resourceName, the VM's
        template's and its recorded instancetype's, as the binder reads them
        (cache.vmiorder.vm_entries; by resourceName itself when the classes are not
        readable)."""
        names: tuple[str, ...] = ()
        if self.vm is not None:
            names = vm_entries(self.vm, self.revisions) or self.vm.device_names
        elif self.vmi is not None:
            names = self.vmi.device_names
        by_resource = self.snap.class_by_resource()
        out: dict[str, int] = {}
        for n in names:
            c: GPUClass | None = by_resource.get(n)
            if c is None and self.snap.classes:
                continue  # not a GPU class: another device the VM asks for
            label = c.metadata.name if c is not None else n
            out[label] = out.get(label, 0) + 1
        return out

    @property
    def node(self) -> str:
        nodes = {d.spec.node_name for d in self.devices}
        # A device's name is <node>-<PCI address, 12 characters, with : and . as ->.
        nodes |= {n[: -len("-0000-00-00-0")] for n in self.device_names if not self.devices}
        return ",".join(sorted(nodes))

    def running_state(self) -> str:
        if self.vm is None:
            return "standalone VMI" if self.vmi is not None else "not found"
        strategy = (self.vm.raw.get("spec") or {}).get("runStrategy")
        state = "running" if set_to_start(self.vm, self.vmi) else "stopped"
        return f"{state} (runStrategy {strategy})" if strategy else state


async def gather(client: Client, namespace: str, name: str) -> VMFacts:
    vm, vmi, snap, events = await asyncio.gather(
        snapshot.get_or_none(client, VirtualMachine, name, namespace),
        snapshot.get_or_none(client, VirtualMachineInstance, name, namespace),
        snapshot.read(client, namespace, nodes=True, vms=False),
        snapshot.events_about(client, namespace, name, ORDER_KINDS),
    )
    facts = VMFacts(namespace, name, vm, vmi, snap, events=events)
    if vm is not None and (key := revision_key(vm)):
        rev_ns, _, rev_name = key.partition("/")
        rev = await snapshot.get_or_none(client, ControllerRevision, rev_name, rev_ns)
        if rev is not None:
            facts.revisions[key] = rev
    if snap.devices is not None:
        facts.devices = by_slot(snap.set_of(namespace, name))
        facts.device_names = [d.metadata.name for d in facts.devices]
        # The devices' own Events (lost, recovered), where the caller may read them.
        found = await asyncio.gather(
            *(
                snapshot.events_about(client, "default", n, ("GPUDevice",))
                for n in facts.device_names
            )
        )
        facts.events = sorted(
            [*facts.events, *(e for es in found for e in es)], key=snapshot.event_time
        )
    else:
        for obj in (vm, vmi):
            listed = obj.metadata.annotations.get(DEVICES_ANNOTATION, "") if obj else ""
            if listed:
                facts.device_names = sorted(n for n in listed.split(",") if n)
                break
    return facts


def _event_at(e: Event) -> datetime | None:
    raw = snapshot.event_time(e)
    return datetime.fromisoformat(raw.replace("Z", "+00:00")) if raw else None


def to_data(f: VMFacts) -> dict[str, Any]:
    return {
        "vm": f.key,
        "state": f.running_state(),
        "vmi": None
        if f.vmi is None
        else {"phase": f.vmi.phase, "nodeName": f.vmi.node_name, "uid": f.vmi.metadata.uid},
        "order": f.order(),
        "node": f.node,
        "devices": [
            {
                "name": d.metadata.name,
                "slot": d.spec.slot,
                "pciAddress": d.spec.pci_address,
                "className": d.status.class_name,
                "phase": d.status.phase.value if d.status.phase else "",
                "health": d.spec.health.value,
                "healthMessage": d.spec.health_message,
            }
            for d in f.devices
        ]
        or [{"name": n} for n in f.device_names],
        "events": [
            {
                "time": snapshot.event_time(e),
                "type": e.type,
                "reason": e.reason,
                "object": f"{e.regarding.get('kind', '')}/{e.regarding.get('name', '')}",
                "message": e.note,
            }
            for e in f.events
        ],
    }


def _phase_cell(d: GPUDevice, plain: bool) -> Text:
    phase = d.status.phase
    if phase is None:
        return Text("-")
    return Text(phase.value) if plain else Text(phase.value, style=COLOURS[phase])


def order_words(order: dict[str, int]) -> str:
    return ", ".join(f"{n} × {c}" for c, n in sorted(order.items())) or "no GPUs"


def show(f: VMFacts, printer: Printer, fmt: Format, now: datetime | None = None) -> None:
    if fmt in ("json", "yaml"):
        printer.data(to_data(f), fmt)
        return
    now = now or datetime.now(UTC)
    head = Table(["", ""])
    head.add("VM", f"{f.key}: {f.running_state()}")
    if f.vmi is not None:
        where = f" on {f.vmi.node_name}" if f.vmi.node_name else ""
        head.add("VMI", f"{f.vmi.phase}{where}")
    head.add("Orders", order_words(f.order()))
    held = len(f.devices) or len(f.device_names)
    head.add("Set", f"{held} GPU(s) on {f.node}" if held else "none bound")
    # Two columns without headers: drop the header line the table starts with.
    for line in head.render().split("\n")[1:]:
        printer.line(line)
    printer.line()
    if f.devices:
        gpus = Table(["gpu", "slot", "pci", "class", "phase", "health"])
        for d in f.devices:
            slot = "" if d.spec.slot is None else str(d.spec.slot)
            gpus.add(
                d.metadata.name,
                slot,
                d.spec.pci_address,
                d.status.class_name,
                _phase_cell(d, printer.plain),
                d.spec.health.value,
            )
        printer.text(gpus.render())
        printer.line()
    elif f.device_names:
        printer.line("GPUs (as the binder annotates the VM): " + ", ".join(f.device_names))
        printer.line()
    if not f.events:
        printer.line("No Events about it (they expire after an hour by default).")
        return
    printer.line("History (Events, newest last):")
    history = Table(["age", "type", "reason", "object", "message"])
    for e in f.events:
        kind = {"VirtualMachine": "VM", "VirtualMachineInstance": "VMI", "GPUDevice": "GPU"}
        obj = f"{kind.get(e.regarding.get('kind', ''), '?')} {e.regarding.get('name', '')}"
        history.add(age(_event_at(e), now), e.type, e.reason, obj, e.note)
    printer.text(history.render())
