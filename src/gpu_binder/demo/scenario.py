"""The demo's script: each act a rule of DESIGN §2–§4, played on the embedded cluster."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.sim.builders import vmi_object
from gpu_binder.sim.catalog import H100, L40S
from gpu_binder.sim.cluster import ClassDef, Cluster

H100_CLASS = ClassDef("h100", "nvidia.com/GH100_H100_SXM5_80GB", H100)
L40S_CLASS = ClassDef("l40s", "nvidia.com/AD102GL_L40S", L40S, policy="Spread", release_after="10m")


@dataclass(frozen=True)
class Act:
    title: str
    play: Callable[[Cluster], Awaitable[None]]


async def build() -> Cluster:
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
    await c.kubevirt.step()
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
        "(started while the webhook was down)",
    )
    raw = vmi_object("legacy-1", "hooli", [L40S_CLASS.resource])
    raw["metadata"]["uid"] = "0f1e2d3c-legacy-1"
    raw["status"] = {"phase": "Running", "nodeName": "node-e"}
    c.client.put(VirtualMachineInstance.from_dict(raw))
    await c.tick(10)
    await c.tick(30)
    await c.tick(30)


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
]
