"""Simulated node agents: GPUs as hardware, synced to GPUDevices the way the real agent does.

Each node's GPUs are `Observed` records standing in for sysfs; the real agent's pure
`plan` and its `apply` turn them into GPUDevice writes, so slots, labels and specs follow
the same rules on the embedded cluster as on a real node. One fleet subscribes to the
store for all nodes and does only the work that changed when stepped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpu_binder.agent.models import model_of
from gpu_binder.agent.reset import ResetOutcome, wants_reset
from gpu_binder.agent.runner import slot_devices
from gpu_binder.agent.sync import Observed, apply, plan
from gpu_binder.api.meta import utc
from gpu_binder.api.types import GPUClass, GPUDevice, Health
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.catalog import H100, GPUModel
from gpu_binder.sim.fieldmanagers import writes_as
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import create_node, set_allocatable, set_ready

VFIO = "vfio-pci"


def pci_address(position: int) -> str:
    """The PCI address of the GPU in a node's physical position (one bus per GPU)."""
    return f"0000:{0x10 + position:02x}:00.0"


@dataclass(slots=True)
class SimNode:
    """One node's hardware as its agent sees it, and whether the agent and plugin run."""

    name: str
    model: GPUModel
    gpus_per_node: int
    numa_size: int
    nvlink_size: int
    # Present GPUs by physical position.
    gpus: dict[int, Observed] = field(default_factory=dict)
    agent_up: bool = True
    plugin_up: bool = True

    def observed(self, position: int, health: Health = Health.HEALTHY, msg: str = "") -> Observed:
        sxm = model_of(self.model.vendor_id, self.model.device_id)
        return Observed(
            pci_address=pci_address(position),
            vendor_id=self.model.vendor_id,
            device_id=self.model.device_id,
            model=self.model.name,
            numa_node=position // self.numa_size,
            iommu_group=position + 1,
            # PCIe cards have no NVLink fabric; SXM boards split theirs like NUMA.
            nvlink_domain=f"{self.name}-nvl{position // self.nvlink_size}"
            if sxm is None or sxm.sxm
            else None,
            driver=VFIO,
            health=health,
            health_message=msg,
        )


class AgentFleet:
    """The agents of every simulated node.

    `reset_delay` is how long (virtual seconds) a function-level reset takes after release;
    `node_clock` is each node's own clock, which its agent stamps `lastReset` with (the
    virtual clock when not given).
    """

    def __init__(
        self,
        client: MemoryClient,
        clock: Callable[[], datetime],
        *,
        reset_delay: float = 0.0,
        node_clock: Callable[[str], datetime] | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self.node_clock = node_clock or (lambda node: clock())
        self.reset_delay = reset_delay
        self.nodes: dict[str, SimNode] = {}
        self.resets_done = 0
        self._devices: dict[str, set[str]] = defaultdict(set)
        # (class, health, deleting) per device: what allocatable depends on.
        self._served_as: dict[str, tuple[str, str, bool]] = {}
        self._classes: dict[str, GPUClass] = {c.metadata.name: c for c in client.objects(GPUClass)}
        self._resets: set[str] = set()
        self._sync: set[str] = set()
        self._alloc: set[str] = set()
        for d in client.objects(GPUDevice):
            self._on_device("ADDED", d)
        client.subscribe(self._on_event, (GPUDevice, GPUClass))

    # --- faults and changes of hardware -------------------------------------------------

    async def add_node(
        self,
        name: str,
        gpus: int,
        model: GPUModel = H100,
        labels: dict[str, str] | None = None,
        *,
        nvlink_size: int | None = None,
    ) -> SimNode:
        """Register a Node with `gpus` GPUs of model and sync its GPUDevices at once."""
        half = max(1, gpus // 2)
        node = SimNode(name, model, gpus, numa_size=half, nvlink_size=nvlink_size or half)
        for position in range(gpus):
            node.gpus[position] = node.observed(position)
        self.nodes[name] = node
        await create_node(self.client, name, self.clock(), labels)
        self._sync.add(name)
        self._alloc.add(name)
        await self._sync_node(node, ResetOutcome())
        await self._update_allocatable(node)
        return node

    def add_gpu(self, node_name: str) -> str:
        """A GPU appears in the lowest free physical position; returns its PCI address."""
        node = self.nodes[node_name]
        position = next(p for p in range(len(node.gpus) + 1) if p not in node.gpus)
        node.gpus[position] = node.observed(position)
        self._sync.add(node_name)
        return pci_address(position)

    def remove_gpu(self, device: str) -> None:
        """The GPU behind a GPUDevice is gone: the agent deletes the object, stops serving it."""
        node, position = self._locate(device)
        del node.gpus[position]
        self._sync.add(node.name)
        self._alloc.add(node.name)

    def set_health(self, device: str, healthy: bool, message: str = "") -> None:
        """The agent reports the GPU Unhealthy (or Healthy again) on its next step."""
        node, position = self._locate(device)
        health = Health.HEALTHY if healthy else Health.UNHEALTHY
        node.gpus[position] = node.observed(position, health, "" if healthy else message)
        self._sync.add(node.name)
        self._alloc.add(node.name)

    def set_plugin(self, node_name: str, up: bool) -> None:
        """Stop (or restart) the node's device plugin: it serves no units while down."""
        self.nodes[node_name].plugin_up = up
        self._alloc.add(node_name)

    async def lose_node(self, node_name: str) -> None:
        """The node stops reporting: NotReady, and its agent neither syncs nor resets."""
        self.nodes[node_name].agent_up = False
        await set_ready(self.client, node_name, False, self.clock())

    async def restore_node(self, node_name: str) -> None:
        self.nodes[node_name].agent_up = True
        await set_ready(self.client, node_name, True, self.clock())
        self._sync.add(node_name)
        self._alloc.add(node_name)

    # --- the agents' work -----------------------------------------------------------------

    @writes_as("gpu-binder-agent")
    async def step(self) -> int:
        """Do the pending resets, device syncs and allocatable updates; returns writes made."""
        writes = 0
        outcomes = self._due_resets()
        for name in sorted(self._sync | set(outcomes)):
            node = self.nodes.get(name)
            if node is None or not node.agent_up:
                continue
            self._sync.discard(name)
            writes += await self._sync_node(node, outcomes.get(name, ResetOutcome()))
        for name in sorted(self._alloc):
            node = self.nodes.get(name)
            if node is None or not node.agent_up:
                continue
            self._alloc.discard(name)
            writes += await self._update_allocatable(node)
        return writes

    def _due_resets(self) -> dict[str, ResetOutcome]:
        now = self.clock()
        out: dict[str, ResetOutcome] = {}
        for name in sorted(self._resets):
            d = self.client.peek(GPUDevice, name)
            if d is None or not wants_reset(d):
                self._resets.discard(name)
                continue
            node = self.nodes.get(d.spec.node_name)
            if node is None or not node.agent_up:
                continue
            released = d.status.released_at
            if released is not None and (now - utc(released)).total_seconds() < self.reset_delay:
                continue
            outcome = out.setdefault(node.name, ResetOutcome())
            outcome.done[d.spec.pci_address] = self.node_clock(node.name)
            if released is not None:
                outcome.released[d.spec.pci_address] = released
        return out

    async def _sync_node(self, node: SimNode, resets: ResetOutcome) -> int:
        existing = [
            d for n in sorted(self._devices.get(node.name, ())) if (d := self._peek(n)) is not None
        ]
        p = plan(node.name, node.gpus.values(), existing, resets=resets)
        if p.empty:
            return 0
        report = await apply(self.client, node.name, p, existing)
        if report.errors:
            self._sync.add(node.name)  # a lost race: the next step reads afresh
        self.resets_done += len(resets.done)
        return len(report.created) + len(report.updated) + len(report.deleted)

    async def _update_allocatable(self, node: SimNode) -> int:
        allocatable: dict[str, int] = {}
        if node.plugin_up:
            devices = [d for n in sorted(self._devices.get(node.name, ())) if (d := self._peek(n))]
            present = {o.pci_address for o in node.gpus.values()}
            classes = list(self._classes.values())
            for s in slot_devices(devices, present, classes):
                if s.healthy:
                    allocatable[s.resource] = 1
            by_count = {c.metadata.name: c for c in classes if c.spec.pinning == "Node"}
            for d in devices:
                cls = by_count.get(d.status.class_name)
                if cls is not None and d.spec.pci_address in present and d.spec.health == "Healthy":
                    name = cls.spec.resource_name
                    allocatable[name] = allocatable.get(name, 0) + 1
        written = await set_allocatable(self.client, node.name, allocatable)
        return 0 if written is None else 1

    # --- what the store tells the fleet -----------------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is GPUDevice:
            self._on_device(event.type, event.object)
        elif kind is GPUClass:
            cls: GPUClass = event.object
            before = self._classes.pop(cls.metadata.name, None)
            if event.type != "DELETED":
                self._classes[cls.metadata.name] = cls
            # The binder writes class status every pass; only the spec decides serving.
            if before is None or event.type == "DELETED" or before.spec != cls.spec:
                self._alloc.update(self.nodes)

    def _on_device(self, type_: str, d: GPUDevice) -> None:
        name, node = d.metadata.name, d.spec.node_name
        if type_ == "DELETED":
            self._devices[node].discard(name)
            self._served_as.pop(name, None)
            self._resets.discard(name)
            self._sync.add(node)
            self._alloc.add(node)
            return
        if type_ == "ADDED":
            self._devices[node].add(name)
        served = (
            d.status.class_name,
            str(d.spec.health),
            d.metadata.deletion_timestamp is not None,
        )
        if self._served_as.get(name) != served:
            self._served_as[name] = served
            self._alloc.add(node)
        if wants_reset(d):
            self._resets.add(name)

    def _peek(self, name: str) -> GPUDevice | None:
        return self.client.peek(GPUDevice, name)

    def _locate(self, device: str) -> tuple[SimNode, int]:
        d = self.client.peek(GPUDevice, device)
        if d is None:
            raise KeyError(f"no GPUDevice {device}")
        node = self.nodes[d.spec.node_name]
        for position, o in node.gpus.items():
            if o.pci_address == d.spec.pci_address:
                return node, position
        raise KeyError(f"{device} is not present on {node.name}")
