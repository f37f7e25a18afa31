"""KubeVirt's part in `gpu-binder bench start`, played as KubeVirt's controllers do it
(KubeVirt cannot run here): the VM controller creating a VM's VMI, virt-controller creating
its launcher pod and reporting where it was scheduled, virt-handler reporting it running.

- VMI: `pkg/virt-controller/watch/vm/vm.go` `startVMI` creates it from the template
  (`sim.builders.vmi_for`); a refused create fails the sync, and `Controller.Execute`
  queues the VM again with `Queue.AddRateLimited`, on the queue `NewController` makes with
  client-go's `workqueue.DefaultTypedControllerRateLimiter`: 5 ms doubling per consecutive
  failure of the VM up to 1000 s, and over all VMs a bucket of 10 retries a second, bursts
  of 100 (`sim.ratelimit.ItemBackoff`, in real time here: `Requeue`); a success `Forget`s.
- launcher pod: `pkg/virt-controller/watch/vmi/lifecycle.go` `sync` → `createPod` renders
  it with `services/template.go` `renderLaunchManifest` (`sim.launcher`, the shared
  stand-in); a refused create (gpu-binder's pod webhook) is retried the same way, by the
  VMI controller's own queue (`watch/vmi/vmi.go` `Execute`, the same rate limiter), while
  the VMI stays Pending.
- Not played: the controllers' worker counts (`--vm-controller-threads`, 3 by default,
  `watch/application.go`), which would bound how many creates wait on the webhook at once,
  and the FailedCreate Event the VM controller records on each refusal.
- Scheduled: `lifecycle.go` `updateStatus` sets the VMI `Scheduling` once its pod exists
  and `Scheduled`, with `status.nodeName` and the `kubevirt.io/nodeName` label, once the
  pod is ready on a node (KWOK makes a scheduled pod ready at once); each phase change
  stamped (`pkg/controller/controller.go` `SetVMIPhaseTransitionTimestamp`).
- Running: virt-handler on that node (`pkg/virt-handler/vm.go`
  `calculateVmPhaseForStatusReason`) once the domain runs.

VMIs have no status subresource (virt-operator's `NewVirtualMachineInstanceCrd`), so each
report is a merge patch of the VMI; with no KubeVirt webhook here, nothing reverts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpu_binder.api.kubevirt import KUBEVIRT_API_VERSION
from gpu_binder.api.pod import Pod
from gpu_binder.client.errors import ApiError, NotFound
from gpu_binder.kube import KubeClient
from gpu_binder.sim.launcher import render_launcher_pod
from gpu_binder.sim.ratelimit import ItemBackoff

NODE_NAME_LABEL = "kubevirt.io/nodeName"
MERGE_PATCH = "application/merge-patch+json"


def vmis_path(namespace: str) -> str:
    return f"/apis/{KUBEVIRT_API_VERSION}/namespaces/{namespace}/virtualmachineinstances"


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


class Requeue:
    """One KubeVirt controller's queue, as far as its retries go: `AddRateLimited` after a
    failed sync of a key, `Forget` after a good one (module docstring), in real time."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.backoff = ItemBackoff()
        self.clock = clock or (lambda: datetime.now(UTC))

    def after_failure(self, key: str) -> float:
        """The seconds until the key's retry, its failure counted."""
        now = self.clock()
        self.backoff.due(now)  # the timers spent: the key's last retry among them
        return max(0.0, (self.backoff.failed(key, now) - now).total_seconds())

    def succeeded(self, key: str) -> None:
        self.backoff.forget(key)


async def create_vmi(
    client: KubeClient, vmi: dict[str, Any], refused: list[str], requeue: Requeue
) -> dict[str, Any]:
    """The VM controller's create, again after each refusal; the VMI as stored."""
    meta = vmi["metadata"]
    path, key = vmis_path(meta["namespace"]), f"{meta['namespace']}/{meta['name']}"
    while True:
        try:
            stored = await client.request("POST", path, vmi)
        except ApiError as e:
            refused.append(e.message)
            await asyncio.sleep(requeue.after_failure(key))
        else:
            requeue.succeeded(key)
            return stored


async def create_launcher_pod(
    client: KubeClient, vmi: dict[str, Any], refused: list[str], requeue: Requeue
) -> dict[str, Any]:
    """virt-controller's launcher pod for the stored VMI, again after each refusal."""
    pod = render_launcher_pod(vmi)
    meta = vmi["metadata"]
    path, key = pods_path(meta["namespace"]), f"{meta['namespace']}/{meta['name']}"
    while True:
        try:
            created = await client.request("POST", path, pod)
        except ApiError as e:
            refused.append(e.message)
            await asyncio.sleep(requeue.after_failure(key))
        else:
            requeue.succeeded(key)
            return created


async def report_scheduled(client: KubeClient, pod: Pod) -> None:
    """virt-controller's Scheduled (node and label), then virt-handler's Running, for the
    VMI of a launcher pod the scheduler placed."""
    name, node = pod.vmi_name, pod.node_name
    if not name or not node:
        return
    path = f"{vmis_path(pod.metadata.namespace)}/{name}"
    stamps: list[dict[str, str]] = []
    for phase in ("Scheduled", "Running"):
        stamps.append({"phase": phase, "phaseTransitionTimestamp": _now()})
        status: dict[str, Any] = {"phase": phase, "phaseTransitionTimestamps": list(stamps)}
        patch: dict[str, Any] = {"status": status}
        if phase == "Scheduled":
            status["nodeName"] = node
            patch["metadata"] = {"labels": {NODE_NAME_LABEL: node}}
        try:
            await client.request("PATCH", path, patch, content_type=MERGE_PATCH)
        except NotFound:
            return  # deleted meanwhile: nothing runs


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
