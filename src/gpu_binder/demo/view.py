"""The demo's live view: device slots per node coloured by phase, and the decision log."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpu_binder.display.slots import by_slot, glyphs, legend
from gpu_binder.sim.cluster import Cluster

LEGEND = legend(plain=False)
PLAIN_LEGEND = legend(plain=True).plain


def slots(c: Cluster, plain: bool = False) -> Table:
    t = Table(show_header=True, header_style="bold", expand=False)
    t.add_column("node")
    t.add_column("state")
    t.add_column("slots")
    t.add_column("VMs")
    world = c.world
    for name in sorted(world.devices.by_node):
        node = world.nodes.get(name)
        state = "gone" if node is None else ("Ready" if node.ready else "NotReady")
        if node is not None and node.unschedulable:
            state += ",cordoned"
        devs = by_slot(world.devices.by_name[n] for n in world.devices.by_node[name])
        vms: list[str] = []
        for d in devs:
            if d.status.binding and d.status.binding.vm.name not in vms:
                vms.append(d.status.binding.vm.name)
        t.add_row(name, state, glyphs(devs, plain, sep=" "), ", ".join(vms))
    return t


SHORT_KINDS = {"VirtualMachine": "VM", "VirtualMachineInstance": "VMI", "GPUDevice": "GPU"}


def decisions(c: Cluster, lines: int = 10) -> Panel:
    notes = c.notes()[-lines:]
    text = Text()
    for n in notes:
        style = "red" if n.type == "Warning" else "white"
        kind = SHORT_KINDS.get(n.kind, n.kind)
        text.append(f"{n.reason:<15} {kind} {n.name}: {n.message}\n", style=style)
    return Panel(text, title="decisions (Events, with their reasons)", border_style="blue")


def story(c: Cluster, lines: int = 6) -> Panel:
    said = [text for _, who, text in c.log.lines if who in ("demo", "webhook")][-lines:]
    return Panel(Text("\n".join(said)), title="what happens", border_style="green")


def frame(c: Cluster, title: str, step: int, total: int) -> Group:
    header = Text(
        f"[{step}/{total}] {title}   t+{int((c.clock() - c.t0).total_seconds())}s", style="bold"
    )
    return Group(header, slots(c), LEGEND, story(c), decisions(c))
