"""The demo's script: each act a rule of DESIGN §2–§4, played on the embedded cluster."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import GPUDevice
from gpu_binder.sim.cluster import ClassDef, Cluster

H100 = ClassDef("h100", "nvidia.com/GH100_H100_SXM5_80GB", "0x2330", "H100")
L40S = ClassDef(
    "l40s", "nvidia.com/AD102GL_L40S", "0x26b9", "L40S", policy="Spread", release_after="10m"
)


@dataclass(frozen=True)
class Act:
    title: str
    play: Callable[[Cluster], Awaitable[None]]


def build() -> Cluster:
    c = Cluster([H100, L40S])
    for name in ("node-a", "node-b", "node-c", "node-e"):
        c.add_node(name, {"h100": 8})
    c.add_node("node-d", {"l40s": 8})
    return c


def set_of(c: Cluster, key: str) -> list[str]:
    return [d.metadata.name for d in c.world.devices.set_of(key)]


async def ordering(c: Cluster) -> None:
    c.add_vm("acme", "train-1", {"h100": 2})
    c.add_vm("acme", "train-2", {"h100": 4})
    c.add_vm("globex", "web-1", {"l40s": 1})
    await c.tick(1)


async def start_admitted(c: Cluster) -> None:
    await c.set_running("acme/train-2", True)
    await c.tick(1)


async def start_with_request(c: Cluster) -> None:
    c.add_vm("globex", "infer-1", {"h100": 1}, running=True)
    await c.kubevirt()
    await c.tick(1)


async def stop_start_same(c: Cluster) -> None:
    before = set_of(c, "acme/train-2")
    await c.set_running("acme/train-2", False)
    await c.tick(30)
    await c.set_running("acme/train-2", True)
    await c.tick(1)
    after = set_of(c, "acme/train-2")
    c.log.add(c.clock(), "demo", f"train-2 kept its GPUs across a restart: {before == after}")


async def release_and_clean(c: Cluster) -> None:
    await c.set_running("globex/web-1", True)
    await c.tick(5)
    await c.set_running("globex/web-1", False)
    for _ in range(11):
        await c.tick(60)


async def big_order(c: Cluster) -> None:
    c.add_vm("initech", "big-1", {"h100": 8})
    await c.tick(1)


async def cordon(c: Cluster) -> None:
    node = c.world.devices.set_of("acme/train-1")[0].spec.node_name
    c.log.add(c.clock(), "admin", f"cordon {node}")
    await c.set_node(node, cordon=True)
    await c.tick(1)


async def node_lost(c: Cluster) -> None:
    running = c.world.devices.set_of("acme/train-2")[0].spec.node_name
    c.add_vm("acme", "dev-1", {"h100": 1})
    await c.tick(1)
    c.log.add(c.clock(), "fault", f"{running} stops reporting Ready")
    await c.set_node(running, ready=False)
    for _ in range(6):
        await c.tick(60)
    await c.set_running("acme/train-2", False)
    await c.tick(5)
    await c.set_node(running, ready=True)
    await c.tick(30)


async def deleted_device(c: Cluster) -> None:
    await c.set_running("globex/infer-1", True)
    await c.tick(1)
    devs = c.world.devices.set_of("globex/infer-1")
    if devs:
        name = devs[0].metadata.name
        c.log.add(c.clock(), "admin", f"delete GPUDevice {name}")
        await c.client.delete(GPUDevice, name)
        await c.tick(5)
        await c.set_running("globex/infer-1", False)
        await c.tick(5)


async def unmanaged(c: Cluster) -> None:
    raw = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "legacy-1", "namespace": "hooli", "uid": "legacy-1-uid"},
        "spec": {"domain": {"devices": {"gpus": [{"name": "gpu0", "deviceName": H100.resource}]}}},
        "status": {"phase": "Running", "nodeName": "node-e"},
    }
    c.log.add(c.clock(), "fault", "VMI hooli/legacy-1 started on node-e while the webhook was down")
    c.client.put(VirtualMachineInstance.from_dict(raw))
    await c.tick(10)
    await c.tick(30)


ACTS = [
    Act("Orders are bound: each VM's GPUs reserved on one node", ordering),
    Act("A VM start admitted by the webhook: pinned to its set", start_admitted),
    Act("A VM started before binding: the webhook asks, the binder answers", start_with_request),
    Act("Stop and start: the same GPUs", stop_start_same),
    Act("Released 10 minutes after stopping, cleaned before reuse", release_and_clean),
    Act("An 8-GPU order: Pack kept a whole node free", big_order),
    Act("A cordoned node: its stopped sets move away", cordon),
    Act("A node lost: stopped VMs rebind, running ones keep their Lost GPU", node_lost),
    Act("A deleted device waits for its VMI to end", deleted_device),
    Act("An unmanaged VMI is adopted after the attachment grace", unmanaged),
]
