"""The embedded cluster's kube-scheduler: it binds pods to nodes, never VMIs.

A pod without a node is bound to a node that passes kube-scheduler's filters that matter
here (kubernetes `pkg/scheduler/framework/plugins`):
- NodeUnschedulable: not cordoned (`spec.unschedulable`);
- TaintToleration: Ready — a node that is not gets the `node.kubernetes.io/not-ready`
  NoSchedule taint from the node lifecycle controller, which KubeVirt's pods do not
  tolerate;
- NodeAffinity: the pod's `nodeSelector` and required node affinity;
- NodeResourcesFit, for extended resources: the node's allocatable minus what the pods
  bound to it and not yet ended ask for covers what the pod asks for.
Of the nodes that pass, the one with the fewest pods (a stand-in for the default
LeastAllocated score), then the first by name. Nothing else decides where a pod goes:
in particular not which GPU a slot resource is on that node, nor whose it is.

A pod no node can take waits, and is tried again when a node changes (readiness, cordon,
labels, allocatable) or when a pod's resources are freed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpu_binder.api.kubevirt import Node
from gpu_binder.api.pod import Pod
from gpu_binder.client.errors import Conflict
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.affinity import named_nodes, node_matches
from gpu_binder.sim.fieldmanagers import writes_as
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import ATTEMPTS

NodeShape = tuple[bool, bool, tuple[tuple[str, str], ...], tuple[tuple[str, int], ...]]


class Scheduler:
    def __init__(self, client: MemoryClient, clock: Callable[[], datetime]) -> None:
        self.client = client
        self.clock = clock
        self.bound = 0
        # Pods that waited for a node at least once (no node could take them then).
        self.waited: set[str] = set()
        self._pending: set[str] = set()
        self._unschedulable: set[str] = set()
        # Pods bound and not ended: key -> (node, units asked), and the sums per node.
        self._held: dict[str, tuple[str, Counter[str]]] = {}
        self._used: dict[str, Counter[str]] = {}
        self._pods_on: Counter[str] = Counter()
        self._node_shape: dict[str, NodeShape] = {}
        # Nodes with a unit of a resource free (allocatable above what bound pods ask):
        # the nodes a pod asking for it may go to, without looking at every node.
        self._allocatable: dict[str, dict[str, int]] = {}
        self._free: dict[str, set[str]] = {}
        for node in client.objects(Node):
            self._node_shape[node.name] = _shape(node)
            self._set_allocatable(node.name, node.allocatable)
        for pod in client.objects(Pod):
            self._on_pod(pod, deleted=False)
        client.subscribe(self._on_event, (Pod, Node))

    def used(self, node: str) -> Counter[str]:
        """Units the pods bound to a node and not ended ask for."""
        return self._used.get(node, Counter())

    @writes_as("kube-scheduler")
    async def step(self) -> int:
        writes = 0
        for key in sorted(self._pending):
            self._pending.discard(key)
            writes += await self._schedule(key)
        return writes

    async def _schedule(self, key: str) -> int:
        namespace, _, name = key.partition("/")
        pod = self.client.peek(Pod, name, namespace)
        if pod is None or not _unbound(pod):
            return 0
        node = self._pick(pod)
        if node is None:
            self._unschedulable.add(key)
            self.waited.add(key)
            return 0

        for _ in range(ATTEMPTS):
            current = self.client.peek(Pod, name, namespace)
            if current is None or current.metadata.uid != pod.metadata.uid:
                return 0
            if not _unbound(current):
                return 0
            try:
                await self.client.bind_pod(current, node)
            except Conflict:
                continue
            self.bound += 1
            return 1
        return 0

    def _pick(self, pod: Pod) -> str | None:
        spec = pod.raw.get("spec") or {}
        names = named_nodes(spec)
        for resource in pod.resources:
            free = self._free.get(resource, set())
            names = free if names is None else names & free
        if names is None:
            nodes = self.client.objects(Node)
        else:
            nodes = [n for x in sorted(names) if (n := self.client.peek(Node, x)) is not None]
        fit = [n.name for n in nodes if self._fits(pod, n, spec)]
        return min(fit, key=lambda n: (self._pods_on[n], n)) if fit else None

    def _set_allocatable(self, node: str, allocatable: dict[str, int] | None) -> None:
        before = self._allocatable.pop(node, {})
        if allocatable is not None:
            self._allocatable[node] = dict(allocatable)
        self._refresh(node, set(before) | set(allocatable or {}))

    def _refresh(self, node: str, resources: set[str] | Counter[str]) -> None:
        allocatable = self._allocatable.get(node, {})
        used = self._used.get(node)
        for r in resources:
            if allocatable.get(r, 0) - (used[r] if used else 0) > 0:
                self._free.setdefault(r, set()).add(node)
            else:
                nodes = self._free.get(r)
                if nodes is not None:
                    nodes.discard(node)

    def _fits(self, pod: Pod, node: Node, spec: dict[str, Any]) -> bool:
        if not node.ready or node.unschedulable or not node_matches(spec, node):
            return False
        used = self._used.get(node.name)
        for resource, n in pod.resources.items():
            free = node.allocatable.get(resource, 0) - (used[resource] if used else 0)
            if free < n:
                return False
        return True

    # --- what the store tells the scheduler ---------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is Pod:
            self._on_pod(event.object, deleted=event.type == "DELETED")
        elif kind is Node:
            node: Node = event.object
            shape = None if event.type == "DELETED" else _shape(node)
            if self._node_shape.get(node.name) != shape:
                if shape is None:
                    self._node_shape.pop(node.name, None)
                else:
                    self._node_shape[node.name] = shape
                self._set_allocatable(node.name, None if shape is None else node.allocatable)
                self._retry()

    def _on_pod(self, pod: Pod, deleted: bool) -> None:
        key = pod.key
        held = self._held.pop(key, None)
        if held is not None:
            self._used[held[0]].subtract(held[1])
            self._pods_on[held[0]] -= 1
            self._refresh(held[0], held[1])
        if deleted or pod.ended:
            self._pending.discard(key)
            self._unschedulable.discard(key)
            if held is not None:
                self._retry()  # its resources are free: a waiting pod may fit now
            return
        if pod.node_name:
            self._held[key] = (pod.node_name, pod.resources)
            self._used.setdefault(pod.node_name, Counter()).update(pod.resources)
            self._pods_on[pod.node_name] += 1
            self._refresh(pod.node_name, pod.resources)
            self._pending.discard(key)
            self._unschedulable.discard(key)
        elif _unbound(pod) and key not in self._unschedulable:
            self._pending.add(key)

    def _retry(self) -> None:
        self._pending |= self._unschedulable
        self._unschedulable.clear()


def _unbound(pod: Pod) -> bool:
    """Waiting for a node: a pod being deleted before it got one is never scheduled."""
    return not pod.node_name and not pod.ended and pod.metadata.deletion_timestamp is None


def _shape(node: Node) -> NodeShape:
    """What the filters read of a node."""
    return (
        node.ready,
        node.unschedulable,
        tuple(sorted(node.metadata.labels.items())),
        tuple(sorted(node.allocatable.items())),
    )
