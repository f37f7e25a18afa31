"""`kubectl gpu status`: every class's counts, and every GPU node's slots by phase.

The class counts are the binder's own (GPUClass status, written each pass), so the
largest free set is the one placement would pick under the class's topology; the node
rows are read from the GPUDevices.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gpu_binder.api.kubevirt import Node
from gpu_binder.api.types import GPUClass, GPUDevice
from gpu_binder.display.slots import by_slot, glyphs, legend
from gpu_binder.kubectl.output import Format, Printer, Table
from gpu_binder.kubectl.snapshot import Snapshot


def class_facts(c: GPUClass) -> dict[str, Any]:
    s, spec = c.status, c.spec
    return {
        "name": c.metadata.name,
        "resourceName": spec.resource_name,
        "devices": s.devices,
        "available": s.available,
        "bound": s.bound,
        "attached": s.attached,
        "lost": s.lost,
        "cleaning": s.cleaning,
        "largestFreeSet": s.largest_free_set,
        "policy": spec.placement.policy,
        "topology": spec.placement.topology,
        "pinning": spec.pinning,
        "releaseAfterStopped": spec.reservation.release_after_stopped or "",
    }


def node_state(node: Node | None) -> str:
    """Ready or NotReady, cordoned, GPUDegraded: what decides whether sets may stay."""
    if node is None:
        return "gone"
    words = ["Ready" if node.ready else "NotReady"]
    if node.unschedulable:
        words.append("cordoned")
    for c in (node.raw.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "GPUDegraded" and c.get("status") == "True":
            words.append("GPUDegraded")
    return ",".join(words)


def holder(d: GPUDevice) -> str:
    b = d.status.binding
    return b.vm.key if b is not None else ""


def node_facts(snap: Snapshot, name: str, namespace: str | None) -> dict[str, Any]:
    devices = by_slot(snap.devices_on(name))
    state = "?" if snap.nodes is None else node_state(snap.nodes.get(name))
    vms: dict[str, int] = {}
    for d in devices:
        key = holder(d)
        if key and (namespace is None or key.startswith(f"{namespace}/")):
            vms[key] = vms.get(key, 0) + 1
    return {
        "name": name,
        "state": state,
        "classes": sorted({d.status.class_name for d in devices if d.status.class_name}),
        "slots": [
            {
                "slot": d.spec.slot,
                "device": d.metadata.name,
                "pciAddress": d.spec.pci_address,
                "className": d.status.class_name,
                "phase": d.status.phase.value if d.status.phase else "",
                "health": d.spec.health.value,
                "vm": holder(d),
            }
            for d in devices
        ],
        "vms": vms,
        "_devices": devices,
    }


def facts(snap: Snapshot, namespace: str | None) -> dict[str, Any]:
    nodes = sorted({d.spec.node_name for d in snap.devices or ()})
    return {
        "classes": [class_facts(c) for _, c in sorted(snap.classes.items())],
        "nodes": [node_facts(snap, n, namespace) for n in nodes],
    }


def show(snap: Snapshot, printer: Printer, fmt: Format, namespace: str | None) -> None:
    found = facts(snap, namespace)
    if fmt in ("json", "yaml"):
        for n in found["nodes"]:
            n.pop("_devices")
        printer.data(found, fmt)
        return
    wide = fmt == "wide"
    headers = ["class", "resource", "devices", "available", "bound", "attached", "lost"]
    headers += ["cleaning", "largest free set"]
    if wide:
        headers += ["policy", "topology", "pinning", "release after stop"]
    classes = Table(headers)
    for c in found["classes"]:
        row = [c["name"], c["resourceName"]]
        row += [str(c[k]) for k in ("devices", "available", "bound", "attached", "lost")]
        row += [str(c["cleaning"]), str(c["largestFreeSet"])]
        if wide:
            row += [c["policy"], c["topology"], c["pinning"], c["releaseAfterStopped"] or "-"]
        classes.add(*row)
    if found["classes"]:
        printer.text(classes.render())
    else:
        printer.line("No GPUClasses." if "gpuclasses" not in snap.forbidden else "")
    if snap.devices is None:
        printer.line("(GPUDevices are not readable with these credentials: no node view)")
        return
    if found["nodes"]:
        printer.line()
        nodes = Table(["node", "state", "gpus", "vms"] + (["classes"] if wide else []))
        for n in found["nodes"]:
            vms = ", ".join(f"{k} ({v})" for k, v in sorted(n["vms"].items()))
            cells: list[str | Text] = [n["name"], n["state"], glyphs(n["_devices"], printer.plain)]
            cells.append(vms)
            if wide:
                cells.append(",".join(n["classes"]))
            nodes.add(*cells)
        printer.text(nodes.render())
        printer.line(legend(printer.plain))
