"""The simulated kubelets and virt-handlers of every node.

A kubelet runs the pods the scheduler bound to its node. Its device manager hands a pod
the units of each extended resource it asks for, out of what the node's device plugins
serve and the pods running there do not hold; a pod asking for more than is free fails
admission (kubernetes `pkg/kubelet/cm/devicemanager/manager.go`, `Allocate`; the pod ends
Failed, reason UnexpectedAdmissionError). The device plugin decides nothing more: a pod
asking for slot s3 on node B gets node B's s3 GPU, whoever it is bound to.

A pod's container ends as KubeVirt's do: the WaitForFirstConsumer temporary pod's only
echoes; virt-launcher exits once its VMI's domain is gone (the VMI final or gone). A
deleted pod is stopped, then goes (the store's graceful pod deletion), but a launcher
pod whose domain still runs waits for virt-handler to shut the guest down first. A
kubelet whose node is not Ready does nothing until it is again.

`Kubelet` joins them with virt-handler (sim.handler), as one part the driver steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.client.errors import NotFound
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.builders import iso
from gpu_binder.sim.clocks import Clocks
from gpu_binder.sim.fieldmanagers import writes_as
from gpu_binder.sim.handler import VirtHandler
from gpu_binder.sim.launcher import is_temp_pod
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.vmistatus import VMI_FINALIZER, with_phase

__all__ = ["VMI_FINALIZER", "Kubelet", "Kubelets", "with_phase"]

# Phases in which a VMI's domain runs (or is being started) in its launcher pod.
_DOMAIN = ("Scheduled", "Running")


class Kubelets:
    """Every node's kubelet, for pods."""

    def __init__(self, client: MemoryClient, clocks: Clocks) -> None:
        self.client = client
        self.clocks = clocks
        self.started = 0
        # Pods that failed the device manager's admission: (pod key, why).
        self.refused: list[tuple[str, str]] = []
        self._to_run: set[str] = set()
        self._to_end: set[str] = set()
        # Units held by running pods: pod key -> (node, units), and the sums per node.
        self._running: dict[str, tuple[str, Counter[str]]] = {}
        self._in_use: dict[str, Counter[str]] = {}
        # Pods by the uid of the VMI that owns them.
        self._of_vmi: dict[str, set[str]] = {}
        for pod in client.objects(Pod):
            self._on_pod(pod, deleted=False)
        client.subscribe(self._on_event, (Pod, VirtualMachineInstance))

    def in_use(self, node: str) -> Counter[str]:
        """Device units held on a node by its running pods."""
        return self._in_use.get(node, Counter())

    @writes_as("kubelet")
    async def step(self) -> int:
        writes = 0
        for key in sorted(self._to_end):
            pod = self._pod(key)
            if pod is None or pod.ended:
                self._to_end.discard(key)
                continue
            if not self._node_up(pod.node_name):
                continue
            outcome = self._outcome(pod)
            if outcome is None:
                continue  # its domain still runs: virt-handler shuts it down first
            self._to_end.discard(key)
            writes += await self._end(pod, outcome)
        for key in sorted(self._to_run):
            pod = self._pod(key)
            if pod is None or pod.ended or pod.phase != "Pending" or _deleting(pod):
                self._to_run.discard(key)
                continue
            node = self.client.peek(Node, pod.node_name)
            if node is None or not node.ready:
                continue
            self._to_run.discard(key)
            writes += await self._run(pod, node)
        return writes

    def _outcome(self, pod: Pod) -> str | None:
        """The phase the pod's container ends in now, or None while it must run on."""
        if pod.phase == "Pending":
            return "Failed" if _deleting(pod) else None
        if is_temp_pod(pod.raw):
            return "Succeeded"
        vmi = self._vmi_of(pod)
        if vmi is not None and vmi.phase in _DOMAIN and vmi.node_name == pod.node_name:
            return None
        if vmi is not None and vmi.live and not _deleting(pod):
            return None  # virt-controller has not handed it over yet
        return "Succeeded" if vmi is not None and vmi.phase == "Succeeded" else "Failed"

    async def _run(self, pod: Pod, node: Node) -> int:
        used = self._in_use.get(node.name, Counter())
        short = sorted(
            r for r, n in pod.resources.items() if node.allocatable.get(r, 0) - used[r] < n
        )
        now = self.clocks.now(node.name)
        status: dict[str, Any] = {"startTime": iso(now)}
        if short:
            message = f"device resources not free on {node.name}: {', '.join(short)}"
            self.refused.append((pod.key, message))
            status.update(phase="Failed", reason="UnexpectedAdmissionError", message=message)
        else:
            status.update(
                phase="Running",
                conditions=[
                    *_scheduled(pod),
                    {"type": "Ready", "status": "True", "lastTransitionTime": iso(now)},
                ],
            )
        written = await self._write_status(pod, "Pending", status)
        if written and not short:
            self.started += 1
        return written

    async def _end(self, pod: Pod, phase: str) -> int:
        if pod.phase == "Pending":
            # Never started: the kubelet deletes it for good at once.
            try:
                await self.client.delete(
                    Pod, pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                )
            except NotFound:
                return 0
            return 1
        status = {**(pod.raw.get("status") or {}), "phase": phase}
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "Ready"
        ] + [{"type": "Ready", "status": "False"}]
        return await self._write_status(pod, pod.phase, status)

    async def _write_status(self, pod: Pod, before: str, status: dict[str, Any]) -> int:
        uid = pod.metadata.uid

        def change(current: Pod) -> Pod | None:
            if current.metadata.uid != uid or current.phase != before:
                return None
            raw = wire(current)
            raw["status"] = status
            return Pod.from_dict(raw)

        written = await modify(
            self.client, Pod, pod.metadata.name, pod.metadata.namespace, change, status=True
        )
        return 0 if written is None else 1

    def _vmi_of(self, pod: Pod) -> VirtualMachineInstance | None:
        vmi = self.client.peek(VirtualMachineInstance, pod.vmi_name, pod.metadata.namespace)
        return vmi if vmi is not None and vmi.metadata.uid == pod.vmi_uid else None

    def _node_up(self, node: str) -> bool:
        found = self.client.peek(Node, node) if node else None
        return found is not None and found.ready

    def _pod(self, key: str) -> Pod | None:
        namespace, _, name = key.partition("/")
        return self.client.peek(Pod, name, namespace)

    # --- what the store tells the kubelets -----------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is Pod:
            self._on_pod(event.object, deleted=event.type == "DELETED")
        elif kind is VirtualMachineInstance:
            vmi: VirtualMachineInstance = event.object
            if event.type == "DELETED" or not vmi.live or vmi.being_deleted:
                # Its launcher pods' virt-launcher exits once the domain is gone.
                self._to_end |= self._of_vmi.get(vmi.metadata.uid, set())

    def _on_pod(self, pod: Pod, deleted: bool) -> None:
        key = pod.key
        held = self._running.pop(key, None)
        if held is not None:
            self._in_use[held[0]].subtract(held[1])
        uid = pod.vmi_uid
        if deleted or pod.ended:
            self._to_run.discard(key)
            self._to_end.discard(key)
            pods = self._of_vmi.get(uid)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._of_vmi[uid]
            return
        if uid:
            self._of_vmi.setdefault(uid, set()).add(key)
        if pod.phase == "Running" and pod.node_name:
            self._running[key] = (pod.node_name, pod.resources)
            self._in_use.setdefault(pod.node_name, Counter()).update(pod.resources)
        if not pod.node_name:
            return
        if _deleting(pod) or (pod.phase == "Running" and is_temp_pod(pod.raw)):
            self._to_end.add(key)
        elif pod.phase == "Pending":
            self._to_run.add(key)
        elif pod.phase == "Running":
            vmi = self._vmi_of(pod)
            if vmi is None or not vmi.live:
                self._to_end.add(key)


def _scheduled(pod: Pod) -> list[dict[str, Any]]:
    """The PodScheduled condition the binding wrote, as the kubelet's status keeps it: the
    kubelet writes it True, and its status manager keeps the transition time of a condition
    whose status held (kubernetes pkg/kubelet/kubelet_pods.go, generateAPIPodStatus;
    pkg/kubelet/status/status_manager.go, updateLastTransitionTime)."""
    conditions = (pod.raw.get("status") or {}).get("conditions") or []
    found = [c for c in conditions if isinstance(c, dict) and c.get("type") == "PodScheduled"]
    return found or [{"type": "PodScheduled", "status": "True"}]


def _deleting(pod: Pod) -> bool:
    return pod.metadata.deletion_timestamp is not None


class Kubelet:
    """Every node's kubelet and virt-handler, stepped by the driver as one."""

    def __init__(self, client: MemoryClient, clock: Clocks | Callable[[], datetime]) -> None:
        clocks = clock if isinstance(clock, Clocks) else Clocks(clock)
        self.client = client
        self.clocks = clocks
        self.handler = VirtHandler(client, clocks)
        self.pods = Kubelets(client, clocks)

    @property
    def started(self) -> int:
        """VMIs whose domain started (Running)."""
        return self.handler.started

    @property
    def failed_starts(self) -> list[tuple[str, str]]:
        """Pods the device manager refused: (pod key, why)."""
        return self.pods.refused

    def in_use(self, node: str) -> Counter[str]:
        return self.pods.in_use(node)

    async def step(self) -> int:
        """Start handed-over VMIs and shut down deleted ones' guests, then end and start
        pods."""
        writes = await self.handler.step()
        return writes + await self.pods.step()

    async def finish(
        self, namespace: str, name: str, phase: str = "Succeeded", reason: str = ""
    ) -> VirtualMachineInstance | None:
        return await self.handler.finish(namespace, name, phase, reason)

    async def fail_node(self, node: str, reason: str = "NodeUnresponsive") -> int:
        return await self.handler.fail_node(node, reason)
