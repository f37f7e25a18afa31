"""Launcher pods: whether a VMI's guest may still hold its GPUs, by what only the kubelet
writes.

A VMI has no status subresource, so its phase is its tenant's to write: a VMI patched to
Succeeded while its guest runs would have its GPUs released, reset under the guest and
given away, and its billing stopped (issue 11). The launcher pod's phase is written by
the kubelet through `pods/status`, which no tenant role grants; its GPUs are in it for as
long as it runs (KubeVirt's virt-launcher holds QEMU, which holds the devices:
`pkg/virt-controller/services/template.go` renders them into the compute container).

So a VMI reading Succeeded/Failed while a pod of it that carries its devices still runs
on a Ready node is still in use. Not on a node that is not Ready: its kubelet no longer
reports, the Running is stale, and KubeVirt itself then fails the VMI
(`pkg/virt-controller/watch/node/node.go`: `isNodeUnresponsive`, then
`checkVirtLauncherPodsAndUpdateVMIStatus` marks its VMIs Failed, NodeUnresponsive).
A pod that carries none of its VMI's devices decides nothing: anyone with pod create
rights could make one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import APP_LABEL, LAUNCHER, Pod

# The label selector the binder lists and watches pods with: KubeVirt's pods of VMIs.
LAUNCHER_PODS = f"{APP_LABEL}={LAUNCHER}"


def is_launcher_pod(pod: Pod) -> bool:
    """Whether LAUNCHER_PODS selects the pod."""
    return pod.metadata.labels.get(APP_LABEL) == LAUNCHER


class Launchers:
    """Running launcher pods by the uid of their VMI, with the devices each carries."""

    def __init__(self) -> None:
        # VMI uid → pod key → (node, extended resources the pod holds).
        self._running: dict[str, dict[str, tuple[str, frozenset[str]]]] = defaultdict(dict)
        # Pod key → its VMI's uid and key, for the pods in _running.
        self._vmi_of: dict[str, tuple[str, str]] = {}
        # Node → keys of VMIs with a running pod there: a node's readiness re-decides them.
        self.vmis_on: dict[str, set[str]] = defaultdict(set)
        # VMI uid → pod key → (when the pod was bound to its node, its resources), for the
        # pods not ended; and each such pod's VMI uid.
        self._scheduled: dict[str, dict[str, tuple[datetime, frozenset[str]]]] = {}
        self._scheduled_uid: dict[str, str] = {}

    def apply(self, pod: Pod, deleted: bool) -> set[str]:
        """Take a pod event in; the keys of the VMIs whose running pods changed."""
        key = pod.key
        self._apply_scheduled(pod, deleted)
        changed: set[str] = set()
        if (before := self._vmi_of.pop(key, None)) is not None:
            uid, vmi_key = before
            node, _ = self._running[uid].pop(key)
            if not self._running[uid]:
                del self._running[uid]
            if all(n != node for n, _ in self._running.get(uid, {}).values()):
                self.vmis_on[node].discard(vmi_key)
            changed.add(vmi_key)
        uid, name = pod.vmi_uid, pod.vmi_name
        if not deleted and uid and name and pod.phase == "Running" and pod.node_name:
            vmi_key = f"{pod.metadata.namespace}/{name}"
            self._running[uid][key] = (pod.node_name, frozenset(pod.resources))
            self._vmi_of[key] = (uid, vmi_key)
            self.vmis_on[pod.node_name].add(vmi_key)
            changed.add(vmi_key)
        return changed

    def _apply_scheduled(self, pod: Pod, deleted: bool) -> None:
        key = pod.key
        if (uid := self._scheduled_uid.pop(key, "")) and (pods := self._scheduled.get(uid)):
            pods.pop(key, None)
            if not pods:
                del self._scheduled[uid]
        uid = pod.vmi_uid
        if not deleted and uid and not pod.ended and pod.scheduled_at is not None:
            self._scheduled.setdefault(uid, {})[key] = (pod.scheduled_at, frozenset(pod.resources))
            self._scheduled_uid[key] = uid

    def scheduled_at(self, vmi: VirtualMachineInstance) -> datetime | None:
        """When the first pod of this VMI carrying one of its devices was bound to its
        node, by the API server's clock; None when no such pod is known."""
        wanted = set(vmi.device_names)
        times = [
            at
            for at, resources in self._scheduled.get(vmi.metadata.uid, {}).values()
            if not wanted.isdisjoint(resources)
        ]
        return min(times, default=None)

    def holds(self, vmi: VirtualMachineInstance, ready: Callable[[str], bool]) -> bool:
        """Whether a pod of this VMI that carries one of its devices runs on a node
        `ready` says is Ready."""
        return bool(self.holding_nodes(vmi, ready))

    def holding_nodes(
        self, vmi: VirtualMachineInstance, ready: Callable[[str], bool]
    ) -> frozenset[str]:
        """The Ready nodes where a pod of this VMI carrying one of its devices runs: the
        devices such a pod holds are those nodes' (its set may have moved on since)."""
        pods = self._running.get(vmi.metadata.uid)
        if not pods:
            return frozenset()
        wanted = set(vmi.device_names)
        return frozenset(
            node
            for node, resources in pods.values()
            if ready(node) and not wanted.isdisjoint(resources)
        )
