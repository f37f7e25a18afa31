"""A trace workload for `gpu-binder sim`: the Alibaba GPU trace's cluster and pods played on
the embedded cluster's virtual clock.

The cluster is the trace's node list as the replay builds it (`replay.binder_adapter`): one
GPUClass per GPU model (named and ordered as there, pinning Device, placement
LeastStranded), each node with its GPUs of that model and its CPU and memory as allocatable.
Nodes without GPUs are left out (a VM order never lands there).

Each GPU pod (`replay.order.orders_from_pods`: `num_gpu` whole GPUs, a fractional request
as one) is a VM with that many GPU entries, its CPU and memory as domain requests and, when
its `gpu_spec` names several models present, every one's class in the
`gpu.cozystack.io/classes` annotation (an empty spec accepts every class). The VM is created
and started at its `creation_time` and deleted at its `deletion_time`, both divided by the
time scale. A pod without times (`deletion_time` 0, as in a pod list without the time
columns) is created at its rank among the pods played × `UNTIMED_SPACING_S` and lives to the
end of the run. A pod whose `gpu_spec` names no model of the node list has no class to
order: it is counted as unservable and not created.

Events at the same instant run deletions first (capacity frees before it is asked for),
then creations in file order; a zero-length pod is created before it is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_binder.api.kubevirt import Node as KubeNode
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import CLASSES_ANNOTATION
from gpu_binder.replay.binder_adapter import class_name, resource_name
from gpu_binder.replay.order import Order
from gpu_binder.replay.trace import Node
from gpu_binder.sim.builders import vm_object
from gpu_binder.sim.catalog import GPUModel
from gpu_binder.sim.cluster import ClassDef, Cluster
from gpu_binder.sim.retry import modify, wire

NAMESPACE = "trace"
# Creation spacing of pods without times, in (trace) seconds.
UNTIMED_SPACING_S = 60
# Kinds of events, in the order they run at one instant.
DELETE, CREATE, DELETE_AFTER_CREATE = 0, 1, 2
# Synthetic PCI device IDs, one per model (the trace names models, not IDs).
FIRST_DEVICE_ID = 0x1000


@dataclass(frozen=True, slots=True)
class Event:
    at_s: float  # simulated seconds from the start of the trace
    kind: int
    index: int  # the order's rank among the pods played


@dataclass
class TraceWorkload:
    """The trace's orders and their events; `step` plays the next one."""

    orders: list[Order]
    classes: dict[str, str]  # GPU model -> class name
    time_scale: float
    # Allocatable CPU (millicores) and memory (MiB) per node name.
    resources: dict[str, tuple[int, int]] = field(default_factory=dict)
    origin: float = 0.0  # the cluster's clock (seconds since t0) at trace time 0
    events: list[Event] = field(default_factory=list)
    start_s: list[float] = field(default_factory=list)  # per order: when it is created
    next_event: int = 0
    created: set[int] = field(default_factory=set)
    placed: set[int] = field(default_factory=set)  # bound when created
    placed_later: set[int] = field(default_factory=set)  # bound only at deletion or the end
    unservable: int = 0
    late_events: int = 0  # played after their time (a fault had moved the clock past it)
    gpu_seconds_ordered: float = 0.0

    def __post_init__(self) -> None:
        for i, o in enumerate(self.orders):
            if o.deleted_s == 0:  # no times: file order at a fixed spacing, kept to the end
                self.start_s.append(i * UNTIMED_SPACING_S / self.time_scale)
                self.events.append(Event(self.start_s[i], CREATE, i))
                continue
            created, deleted = o.created_s / self.time_scale, o.deleted_s / self.time_scale
            self.start_s.append(created)
            self.events.append(Event(created, CREATE, i))
            kind = DELETE_AFTER_CREATE if deleted == created else DELETE
            self.events.append(Event(deleted, kind, i))
        self.events.sort(key=lambda e: (e.at_s, e.kind, e.index))

    @property
    def done(self) -> bool:
        return self.next_event >= len(self.events)

    def key(self, i: int) -> str:
        return f"{NAMESPACE}/vm-{i:06d}"

    async def step(self, c: Cluster) -> Event:
        """Advance the clock to the next event and play it."""
        e = self.events[self.next_event]
        self.next_event += 1
        now = (c.clock() - c.t0).total_seconds() - self.origin
        if e.at_s > now:
            await c.tick(e.at_s - now)
        elif e.at_s < now:
            self.late_events += 1
        if e.kind == CREATE:
            await self._create(c, e.index)
        else:
            await self._delete(c, e.index)
        return e

    async def _create(self, c: Cluster, i: int) -> None:
        order = self.orders[i]
        accepted = sorted(self.classes[m] for m in order.models if m in self.classes)
        if order.models and not accepted:
            self.unservable += 1
            return
        accepted = accepted or sorted(self.classes.values())
        resource = c.classes[accepted[0]].resource
        annotations = {CLASSES_ANNOTATION: ",".join(accepted)} if len(accepted) > 1 else None
        gpus = [resource] * order.gpus
        vm = vm_object(f"vm-{i:06d}", NAMESPACE, gpus, running=False, annotations=annotations)
        raw = wire(vm)
        raw["spec"]["template"]["spec"]["domain"]["resources"] = {
            "requests": {"cpu": f"{order.cpu_milli}m", "memory": f"{order.memory_mib}Mi"}
        }
        c.client.put(VirtualMachine.from_dict(raw))
        self.created.add(i)
        await c.settle()
        await c.set_running(self.key(i), True)
        if self.bound(c, i):
            self.placed.add(i)
        if order.deleted_s:
            lifetime = order.deleted_s / self.time_scale - self.start_s[i]
            self.gpu_seconds_ordered += order.gpus * lifetime

    async def _delete(self, c: Cluster, i: int) -> None:
        if i not in self.created:
            return
        self._note_late_placement(c, i)
        await c.delete_vm(self.key(i))
        self.created.discard(i)

    def finish(self, c: Cluster) -> None:
        """At the end of the run: VMs still there that got their GPUs after creation; the
        GPU-time of pods without times (they run to the end)."""
        end = (c.clock() - c.t0).total_seconds() - self.origin
        for i in sorted(self.created):
            self._note_late_placement(c, i)
            if self.orders[i].deleted_s == 0:
                self.gpu_seconds_ordered += self.orders[i].gpus * (end - self.start_s[i])

    def _note_late_placement(self, c: Cluster, i: int) -> None:
        if i not in self.placed and self.bound(c, i):
            self.placed_later.add(i)

    def bound(self, c: Cluster, i: int) -> bool:
        return len(c.world.devices.set_of(self.key(i))) >= self.orders[i].gpus


async def build_trace(
    nodes: Sequence[Node], orders: Sequence[Order], seed: int, time_scale: float = 1.0
) -> tuple[Cluster, TraceWorkload]:
    """The trace's cluster, its devices classified, and the workload of its orders."""
    models = sorted({n.model for n in nodes if n.gpus})
    classes = {m: class_name(m) for m in models}
    if len(set(classes.values())) != len(models):
        raise ValueError(f"GPU models {models} do not make distinct class names")
    defs = [
        ClassDef(
            classes[m],
            resource_name(m),
            GPUModel(f"0x{FIRST_DEVICE_ID + i:04x}"),
            policy="LeastStranded",
            pinning="Device",
        )
        for i, m in enumerate(models)
    ]
    c = Cluster(defs, seed=seed)
    w = TraceWorkload(list(orders), classes, time_scale)
    for n in nodes:
        if n.gpus:
            await c.add_node(node_name(n.name), classes[n.model], n.gpus)
            w.resources[node_name(n.name)] = (n.cpu_milli, n.memory_mib)
    await c.tick(1)
    await keep_resources(c, w.resources)
    w.origin = (c.clock() - c.t0).total_seconds()
    return c, w


def node_name(sn: str) -> str:
    """A trace node name as a Node name (lower case, DNS label characters)."""
    return class_name(sn)


async def keep_resources(c: Cluster, resources: dict[str, tuple[int, int]]) -> None:
    """Give the trace's nodes their CPU and memory (the sim's nodes start with device units
    only); the device plugins' updates keep them (sim.nodes.set_allocatable)."""
    wrote = False
    for name, (cpu, memory) in resources.items():
        node = c.client.peek(KubeNode, name)
        if node is None or node.cpu_milli is not None:
            continue

        def change(node: KubeNode, cpu: int = cpu, memory: int = memory) -> KubeNode | None:
            if node.cpu_milli is not None:
                return None
            raw = wire(node)
            allocatable = raw.setdefault("status", {}).setdefault("allocatable", {})
            allocatable.update({"cpu": f"{cpu}m", "memory": f"{memory}Mi"})
            return KubeNode.from_dict(raw)

        await modify(c.client, KubeNode, name, "", change, status=True)
        wrote = True
    if wrote:
        await c.settle()
