"""Simulated KubeVirt, scheduler, kubelets and virt-handlers on a store, with a stand-in
webhook: the pieces the KubeVirt tests drive without the binder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.clocks import Clocks
from gpu_binder.sim.kubelet import Kubelet
from gpu_binder.sim.kubevirt import KubeVirtSim
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import create_node, set_allocatable
from gpu_binder.sim.storage import Storage

H100 = "nvidia.com/H100"
SLOT0 = "gpu.cozystack.io/10de-2330-s0"
SLOT1 = "gpu.cozystack.io/10de-2330-s1"


def pin(vmi: dict[str, Any], node: str) -> dict[str, Any]:
    """The VMI with a required node affinity to node, as gpu-binder's webhook adds it."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]
    }}}  # fmt: skip
    return {**vmi, "spec": {**vmi["spec"], "affinity": affinity}}


class Webhook:
    """Admission that allows everything (pinned to pin_to when set), or denies while
    `deny` holds a message."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.deny = ""
        self.pin_to = ""

    async def __call__(self, vmi: dict[str, Any]) -> dict[str, Any] | str:
        self.seen.append(vmi)
        if self.deny:
            return self.deny
        return pin(vmi, self.pin_to) if self.pin_to else vmi


class PodWebhook:
    """Pod admission that records what it saw, and denies while `deny` holds a message."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.deny = ""

    async def __call__(self, pod: dict[str, Any]) -> dict[str, Any] | str:
        self.seen.append(pod)
        return self.deny or pod


class KubeVirtWorld:
    def __init__(
        self,
        store: MemoryClient,
        clock: VirtualClock,
        *,
        live_update: bool = True,
        skew: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.store, self.clock = store, clock
        self.webhook = Webhook()
        self.pod_webhook = PodWebhook()
        self.clocks = Clocks(clock.now, skew, seed)
        self.storage = Storage(clock.now)
        self.kubevirt = KubeVirtSim(
            store,
            clock.now,
            self.webhook,
            admit_pod=self.pod_webhook,
            clocks=self.clocks,
            storage=self.storage,
            seed=seed,
            live_update=live_update,
        )
        self.kubelet = Kubelet(store, self.clocks)

    async def node(self, name: str, units: Mapping[str, int] | None = None) -> None:
        """A Ready node whose device plugins serve units (resource name -> count)."""
        await create_node(self.store, name, self.clock.now())
        if units:
            await set_allocatable(self.store, name, units)

    async def settle(self, rounds: int = 50) -> None:
        for _ in range(rounds):
            if await self.kubevirt.step() + await self.kubelet.step() == 0:
                return
        raise AssertionError(f"KubeVirt did not settle in {rounds} rounds")

    def vm(self, name: str = "vm1") -> VirtualMachine | None:
        return self.store.peek(VirtualMachine, name, "t")

    def vmi(self, name: str = "vm1") -> VirtualMachineInstance | None:
        return self.store.peek(VirtualMachineInstance, name, "t")

    def pods(self, vmi: str = "vm1") -> list[Pod]:
        return [p for p in self.store.objects(Pod) if p.vmi_name == vmi]

    def phase(self, name: str = "vm1") -> str:
        found = self.vmi(name)
        return found.phase if found is not None else "gone"
