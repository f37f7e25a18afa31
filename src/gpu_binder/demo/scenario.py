"""The demo's script: each act a rule of DESIGN §2–§4, played on the embedded cluster."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpu_binder.api.kubevirt import Node, VirtualMachine
from gpu_binder.api.slots import device_slot
from gpu_binder.api.types import NODE_ANNOTATION, GPUClass, GPUDevice
from gpu_binder.demo.kubevirt_acts import instancetype, template_edit
from gpu_binder.sim.builders import vmi_object
from gpu_binder.sim.catalog import H100, L40S, gpu_class
from gpu_binder.sim.cluster import ClassDef, Cluster
from gpu_binder.sim.nodes import set_allocatable

H100_CLASS = ClassDef("h100", "nvidia.com/GH100_H100_SXM5_80GB", H100)
L40S_CLASS = ClassDef("l40s", "nvidia.com/AD102GL_L40S", L40S, policy="Spread", release_after="10m")


@dataclass(frozen=True)
class Act:
    title: str
    play: Callable[[Cluster], Awaitable[None]]


async def build() -> Cluster:
    # KubeVirt with its default rollout strategy, LiveUpdate: the VM controller undoes the
    # webhook's VMI affinity (vm.go handleAffinityChangeRequest), and the pod webhook's pin
    # of the launcher pod is what keeps each VM on its set.
    c = Cluster([H100_CLASS, L40S_CLASS])
    for name in ("node-a", "node-b", "node-c", "node-d"):
        await c.add_node(name, "h100")
    await c.add_node("node-e", "l40s")
    await c.settle()
    return c


def node_of(c: Cluster, key: str) -> str:
    devs = c.world.devices.set_of(key)
    return devs[0].spec.node_name if devs else ""


def say(c: Cluster, text: str) -> None:
    c.log.add(c.clock(), "demo", text)


async def ordering(c: Cluster) -> None:
    c.add_vm("acme", "train-1", {"h100": 2})
    c.add_vm("acme", "train-2", {"h100": 4})
    c.add_vm("acme", "notebook", {"h100": 1})
    c.add_vm("globex", "web-1", {"l40s": 1})
    await c.tick(1)


async def start_admitted(c: Cluster) -> None:
    await c.set_running("acme/train-2", True)
    await c.tick(1)


async def start_with_request(c: Cluster) -> None:
    c.add_vm("globex", "infer-1", {"h100": 1}, running=True)
    # KubeVirt creates the VMI before the binder's next pass: the webhook must ask.
    await c.kubevirt.start_vms()
    await c.tick(1)


async def stop_start_same(c: Cluster) -> None:
    before = [d.metadata.name for d in c.world.devices.set_of("acme/train-2")]
    await c.set_running("acme/train-2", False)
    await c.tick(60)
    await c.set_running("acme/train-2", True)
    await c.tick(1)
    after = [d.metadata.name for d in c.world.devices.set_of("acme/train-2")]
    say(c, f"train-2 kept the same {len(after)} GPUs across a restart: {before == after}")


async def release_and_clean(c: Cluster) -> None:
    await c.set_running("globex/web-1", True)
    await c.tick(5)
    await c.set_running("globex/web-1", False)
    for _ in range(11):
        await c.tick(60)


async def big_order(c: Cluster) -> None:
    c.add_vm("initech", "big-1", {"h100": 8})
    await c.tick(1)
    say(c, f"big-1 got the whole of {node_of(c, 'initech/big-1')}")


async def cordon(c: Cluster) -> None:
    node = node_of(c, "acme/train-1")
    say(
        c,
        f"admin cordons {node}: stopped train-1 and notebook hold GPUs there, running train-2 too",
    )
    await c.set_node(node, cordoned=True)
    await c.tick(1)
    say(
        c,
        f"train-1 is now on {node_of(c, 'acme/train-1')}, "
        f"train-2 still on {node_of(c, 'acme/train-2')}; admin uncordons {node}",
    )
    await c.set_node(node, cordoned=False)
    await c.tick(1)


async def node_lost(c: Cluster) -> None:
    node = node_of(c, "acme/train-2")
    c.add_vm("acme", "dev-1", {"h100": 1})
    await c.tick(1)
    say(
        c,
        f"{node} stops reporting Ready: running train-2 and stopped dev-1 "
        f"(on {node_of(c, 'acme/dev-1')}) hold GPUs there",
    )
    await c.set_node(node, ready=False)
    await c.tick(1)
    say(c, f"dev-1 moved away at once, to {node_of(c, 'acme/dev-1')}")
    for _ in range(6):
        await c.tick(60)
    say(c, "train-2 still runs on its Lost GPUs; now its tenant stops it")
    await c.set_running("acme/train-2", False)
    await c.tick(5)
    say(c, f"train-2 is now on {node_of(c, 'acme/train-2')}; {node} comes back")
    await c.set_node(node, ready=True)
    await c.tick(30)


async def gpu_unhealthy(c: Cluster) -> None:
    devs = c.world.devices.set_of("acme/train-1")
    if not devs:
        return
    name = devs[0].metadata.name
    say(c, f"{name} of stopped train-1 falls off the bus")
    await c.set_health(name, False, "fell off the bus (Xid 79)")
    for _ in range(6):
        await c.tick(60)


async def deleted_device(c: Cluster) -> None:
    devs = c.world.devices.set_of("globex/infer-1")
    if not devs:
        return
    name = devs[0].metadata.name
    say(c, f"admin deletes GPUDevice {name} while infer-1 runs on it")
    await c.delete_device(name)
    await c.tick(5)
    say(c, "infer-1 stops")
    await c.set_running("globex/infer-1", False)
    await c.tick(5)


async def unmanaged(c: Cluster) -> None:
    say(
        c,
        "VMI hooli/legacy-1 runs on node-e with an L40S it was never bound "
        "(started before gpu-binder was installed)",
    )
    free = sorted(c.world.devices.free_on("l40s", "node-e"))
    # Its launcher pod asks for the GPU in node-e's slot: the kubelet hands that one out.
    raw = vmi_object("legacy-1", "hooli", [device_slot(c.world.devices.by_name[free[0]])])
    raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-e"}
    await c.start_unmanaged(raw)
    await c.tick(10)
    await c.tick(30)
    await c.tick(30)


async def refused(c: Cluster) -> None:
    say(
        c,
        "rule: an order that fits nowhere is refused, and the webhook denies its VMI with "
        "the binder's reason: the tenant reads in the start error why, and what would fit",
    )
    free = {n: len(c.world.devices.free_on("l40s", n)) for n in c.world.devices.class_nodes["l40s"]}
    most = max(sorted(free), key=lambda n: free[n])
    count = free[most] + 1
    say(
        c,
        f"globex starts render-1 with {count} L40S; the most free on one node is "
        f"{free[most]}, on {most}",
    )
    c.add_vm("globex", "render-1", {"l40s": count}, running=True)
    # KubeVirt creates the VMI before the binder's next pass: the webhook must ask.
    await c.kubevirt.start_vms()
    await c.tick(1)
    say(c, "globex deletes render-1 rather than wait for KubeVirt's retries")
    await c.delete_vm("globex/render-1")


async def foreign_slot(c: Cluster) -> None:
    say(
        c,
        "rule: a VMI naming a GPU slot resource outside its VM's set is denied: "
        "no tenant can take another's GPU by naming its slot",
    )
    # Another tenant's GPU: big-1's, or any bound one.
    bound = c.world.devices.set_of("initech/big-1") or [
        d
        for n in sorted(c.world.devices.by_name)
        if (d := c.world.devices.by_name[n]).status.binding
    ]
    if not bound:
        return
    d = bound[0]
    slot = device_slot(d)
    owner = d.status.binding.vm.key if d.status.binding else "another VM"
    say(
        c,
        f"hooli creates VMI snoop naming {slot}: on {d.spec.node_name} that slot is {owner}'s GPU",
    )
    await c.kubevirt.create_vmi(vmi_object("snoop", "hooli", [slot]))
    await c.settle()


def on_node(c: Cluster, node: str) -> list[GPUDevice]:
    devices = c.world.devices
    return sorted(
        (devices.by_name[n] for n in devices.by_node.get(node, ())),
        key=lambda d: d.spec.slot or 0,
    )


def sets_on(c: Cluster, node: str) -> list[str]:
    """The VMs (namespace/name) holding GPUs on node."""
    keys = {d.status.binding.vm.key for d in on_node(c, node) if d.status.binding}
    return sorted(keys)


def where(c: Cluster, keys: list[str]) -> str:
    return ", ".join(f"{k.partition('/')[2]} to {node_of(c, k) or 'nowhere'}" for k in keys)


def gpu_degraded(c: Cluster, node: str) -> str:
    n = c.client.peek(Node, node)
    for cond in ((n.raw.get("status") or {}).get("conditions") or ()) if n else ():
        if cond.get("type") == "GPUDegraded":
            return f"GPUDegraded={cond.get('status')} ({cond.get('message')})"
    return "no GPUDegraded condition"


async def degraded(c: Cluster) -> None:
    say(
        c,
        "rule: a node whose device plugin serves fewer slots than it has healthy GPUs is "
        "degraded after a grace: the unserved GPUs go Lost and stopped sets move away, "
        "so no VM is pinned to a GPU its kubelet cannot hand out",
    )
    # A node with stopped sets to move and two free GPUs for the plugin to leave out:
    # train-1's, if it is such.
    usable = [
        n
        for n in sorted(c.world.devices.class_nodes["h100"])
        if sets_on(c, n) and sum(1 for d in on_node(c, n) if d.status.binding is None) >= 2
    ]
    node = min(usable, key=lambda n: n != node_of(c, "acme/train-1"), default="node-a")
    devs = on_node(c, node)
    unserved = [d for d in devs if d.status.binding is None][-2:]
    served = {device_slot(d): 1 for d in devs if d not in unserved}
    held = sets_on(c, node)
    say(
        c,
        f"{node}'s device plugin serves {len(served)} of its {len(devs)} slots, not "
        f"{' or '.join(device_slot(d) for d in unserved)}; "
        f"{', '.join(k.partition('/')[2] for k in held) or 'no VM'} "
        f"{'holds' if len(held) == 1 else 'hold'} GPUs there",
    )
    # What the kubelet reports of the plugin: the agents' own write comes with its restart.
    await set_allocatable(c.client, node, served)
    await c.settle()
    for _ in range(3):
        await c.tick(60)
    say(
        c,
        f"after the 2-minute grace {node} has {gpu_degraded(c, node)}; moved: "
        f"{where(c, [k for k in held if node_of(c, k) != node]) or 'none'}; "
        "the plugin is restarted",
    )
    await c.set_plugin(node, True)
    await c.tick(1)
    say(c, f"{node} serves all its slots again: {gpu_degraded(c, node)}")


async def asked_node(c: Cluster) -> None:
    say(
        c,
        f"rule: a stopped VM whose {NODE_ANNOTATION} annotation names another node has its "
        "set moved there: a VM can be placed by hand, beside its data or off a node due for work",
    )
    src = node_of(c, "acme/notebook")
    target = next(
        n for n in sorted(c.world.nodes) if n != src and c.world.devices.free_on("h100", n)
    )
    say(c, f"acme annotates stopped notebook (on {src}) with {NODE_ANNOTATION}={target}")
    await c.annotate_vm("acme/notebook", {NODE_ANNOTATION: target})
    await c.tick(1)
    say(c, f"notebook is now on {node_of(c, 'acme/notebook')}")


async def defrag(c: Cluster) -> None:
    say(
        c,
        "rule: an order that fits on no node gets room by moving stopped VMs' sets, never a "
        "running one nor one that asked for its node: scattered free GPUs still serve a "
        "whole-node order",
    )
    nodes = sorted(c.world.devices.class_nodes["h100"])
    # The order must fit on no node as it is: a node with no GPU bound gets a small stopped
    # VM parked on it (asked for that node, then let go).
    for n in nodes:
        if not sets_on(c, n):
            c.add_vm("acme", f"scratch-{n}", {"h100": 1}, annotations={NODE_ANNOTATION: n})
            await c.tick(1)
            await c.client.patch(
                VirtualMachine,
                f"scratch-{n}",
                "acme",
                {"metadata": {"annotations": {NODE_ANNOTATION: None}}},
            )
            await c.settle()
    free = ", ".join(f"{len(c.world.devices.free_on('h100', n))} on {n}" for n in nodes)
    say(c, f"initech starts big-2 with 8 H100; free H100s: {free}")
    before = {k: node_of(c, k) for k in sorted(c.world.devices.by_vm)}
    c.add_vm("initech", "big-2", {"h100": 8}, running=True)
    await c.tick(1)
    await c.tick(15)
    moved = [k for k, n in before.items() if n and node_of(c, k) != n]
    say(
        c,
        f"big-2 got the whole of {node_of(c, 'initech/big-2') or 'no node'}; "
        f"moved for it: {where(c, moved) or 'none'}",
    )
    if any(key == "initech/big-2" for key, _ in c.kubevirt.denials):
        say(
            c,
            "KubeVirt's first start came while the freed GPUs were being cleaned and was "
            "refused; its retry was admitted",
        )


def ready_of(c: Cluster, name: str) -> str:
    cls = c.client.peek(GPUClass, name)
    for cond in cls.status.conditions if cls else ():
        if cond.type == "Ready":
            return f"Ready={cond.status} {cond.reason}: {cond.message}"
    return "no Ready condition"


async def ambiguous(c: Cluster) -> None:
    say(
        c,
        "rule: a GPU matching two classes is an error shown on both, and neither binds it: "
        "a mistaken class never hands GPUs out under the wrong name",
    )
    say(
        c,
        "admin adds class h100-nvl for H100 NVL cards, but copies the SXM5's device ID "
        f"{H100.device_id} into its match",
    )
    await c.client.create(gpu_class("h100-nvl", H100, "nvidia.com/GH100_H100_NVL"))
    await c.tick(1)
    c.add_vm("acme", "dev-3", {"h100": 1})
    await c.tick(1)
    for name in ("h100", "h100-nvl"):
        say(c, f"class {name}: {ready_of(c, name)}")
    got = len(c.world.devices.set_of("acme/dev-3"))
    say(c, f"acme orders dev-3 (1 × h100): it waits with {got} GPUs")
    await c.client.patch(GPUClass, "h100-nvl", "", {"spec": {"match": {"deviceIDs": ["0x2321"]}}})
    await c.tick(1)
    say(
        c,
        f"admin corrects h100-nvl's device ID to 0x2321: class h100 {ready_of(c, 'h100')}; "
        f"dev-3 got {node_of(c, 'acme/dev-3')}",
    )


ACTS = [
    Act("Orders are bound: each VM's GPUs reserved on one node", ordering),
    Act("A VM start admitted by the webhook: pinned to its set", start_admitted),
    Act("A VM started before binding: the webhook asks, the binder answers", start_with_request),
    Act("Stop and start: the same GPUs", stop_start_same),
    Act("Released 10 minutes after stopping, cleaned before reuse", release_and_clean),
    Act("An 8-GPU order: Pack kept a whole node free", big_order),
    Act("A cordoned node: its stopped sets move away", cordon),
    Act("A node lost: stopped VMs move, running ones keep their Lost GPUs", node_lost),
    Act("A GPU falls off the bus: its stopped VM is rebound", gpu_unhealthy),
    Act("A deleted device waits for its VMI to end", deleted_device),
    Act("An unmanaged VMI is adopted after the attachment grace", unmanaged),
    Act("A start that fits nowhere: refused, and the webhook denies the VMI", refused),
    Act("A VMI naming another VM's GPU slot is denied", foreign_slot),
    Act("A device plugin serving too few slots: the node is degraded", degraded),
    Act("A VM asks for a node: its stopped set moves there", asked_node),
    Act("Defragmentation: stopped sets move to make room for a whole-node order", defrag),
    Act("A GPU matching two classes: both say so, neither binds it", ambiguous),
    Act("An instancetype's GPUs, read from the revision KubeVirt recorded", instancetype),
    Act("A template edit while the VM runs: nothing adopted until its VMI ends", template_edit),
]
