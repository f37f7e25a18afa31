"""What tenants and admins write to KubeVirt's objects on the embedded cluster, as kubectl
would: a VM's template devices, its runStrategy, a cluster instancetype."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_binder.api.instancetype import VirtualMachineClusterInstancetype
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.sim.builders import cluster_instancetype, devices
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire


def put_instancetype(client: MemoryClient, name: str, gpus: Sequence[str]) -> None:
    """Create the cluster instancetype, or give the existing one these GPUs (its
    generation moves on, as an edit's does)."""
    raw = cluster_instancetype(name, gpus)
    found = client.peek(VirtualMachineClusterInstancetype, name)
    if found is not None:
        raw["metadata"] = found.metadata.to_dict()
        raw["metadata"]["generation"] = found.metadata.generation + 1
    client.put(VirtualMachineClusterInstancetype.from_dict(raw))


async def edit_devices(client: MemoryClient, key: str, names: Sequence[str]) -> bool:
    """The VM's template orders one GPU entry per name instead; False when it is gone."""
    ns, _, name = key.partition("/")

    def change(vm: VirtualMachine) -> VirtualMachine | None:
        raw = wire(vm)
        template = raw["spec"].setdefault("template", {}).setdefault("spec", {})
        template.setdefault("domain", {})["devices"] = devices(names)
        return VirtualMachine.from_dict(raw)

    return await modify(client, VirtualMachine, name, ns, change) is not None


async def set_run_strategy(client: MemoryClient, key: str, strategy: str) -> None:
    """spec.runStrategy set (and the deprecated spec.running dropped)."""
    ns, _, name = key.partition("/")

    def change(vm: VirtualMachine) -> VirtualMachine | None:
        raw = wire(vm)
        raw["spec"].pop("running", None)
        raw["spec"]["runStrategy"] = strategy
        return VirtualMachine.from_dict(raw)

    await modify(client, VirtualMachine, name, ns, change)
