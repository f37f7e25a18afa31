"""The demo's acts on KubeVirt's own ways of giving a VM GPUs (issue 10): an instancetype,
read from the revision KubeVirt recorded, and a template edit while the VM runs."""

from __future__ import annotations

from gpu_binder.api.types import Phase
from gpu_binder.sim.cluster import Cluster


def say(c: Cluster, text: str) -> None:
    c.log.add(c.clock(), "demo", text)


def held(c: Cluster, key: str) -> str:
    devs = c.world.devices.set_of(key)
    if not devs:
        return "no GPUs"
    attached = sum(1 for d in devs if d.status.phase == Phase.ATTACHED)
    return f"{len(devs)} GPUs on {devs[0].spec.node_name} ({attached} attached)"


def adoptions_of(c: Cluster, name: str) -> int:
    return sum(1 for n in c.notes() if n.reason == "GPUAdopted" and n.name == name)


async def instancetype(c: Cluster) -> None:
    say(
        c,
        "rule: a VM's GPUs are its template's, or those of its instancetype as KubeVirt "
        "recorded it in a ControllerRevision; a later edit of the instancetype changes no VM "
        "that recorded it",
    )
    c.add_instancetype("gpu-2xh100", {"h100": 2})
    c.add_vm("initech", "infer-it", {}, instancetype="gpu-2xh100")
    await c.tick(1)
    say(c, f"initech orders infer-it with instancetype gpu-2xh100: {held(c, 'initech/infer-it')}")
    c.add_instancetype("gpu-2xh100", {"h100": 4})
    await c.tick(1)
    say(
        c,
        "admin edits gpu-2xh100 to 4 GPUs; infer-it keeps its recorded revision: "
        f"{held(c, 'initech/infer-it')}",
    )
    await c.set_running("initech/infer-it", True)
    await c.tick(1)
    say(c, f"initech starts infer-it: {held(c, 'initech/infer-it')}")


async def template_edit(c: Cluster) -> None:
    say(
        c,
        "rule: a running VMI is the truth: a template edit while it runs binds, adopts and "
        "releases nothing until the VMI ends; the next start orders the new template",
    )
    c.add_vm("acme", "edit-1", {"h100": 1}, running=True)
    await c.tick(1)
    say(c, f"acme starts edit-1 (1 × h100): {held(c, 'acme/edit-1')}")
    await c.edit_template("acme/edit-1", {"h100": 2})
    await c.tick(120)  # resyncs: an adoption would come at one of them
    say(
        c,
        f"acme edits edit-1's template to 2 × h100 while it runs: {held(c, 'acme/edit-1')}, "
        f"{adoptions_of(c, 'edit-1')} adopted",
    )
    await c.set_running("acme/edit-1", False)
    await c.tick(1)
    await c.set_running("acme/edit-1", True)
    await c.tick(1)
    say(c, f"acme restarts edit-1: {held(c, 'acme/edit-1')}")
