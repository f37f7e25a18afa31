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
- Workers: each controller syncs keys on its own threads (`Controller.Run(threadiness)`,
  each a `processNextWorkItem` loop), `--vm-controller-threads` 3 and
  `--vmi-controller-threads` 10 by default (`watch/application.go`
  `defaultControllerThreads`, `defaultVMIControllerThreads`): a sync holds one while its
  create waits on the API server, and so on gpu-binder's webhook, so at most 3 VMI creates
  wait on it at once (`Workers`). A key queued again for a retry waits its backoff on no
  thread. Every request of virt-controller takes a token of its client's bucket, 200 a
  second in bursts of 400 (`Execute`: `flowcontrol.NewTokenBucketRateLimiter` with
  `pkg/virt-config/virt-config.go` `DefaultVirtControllerQPS`, `…Burst`;
  `sim.ratelimit.TokenBucket`).
- Not played: the FailedCreate Event the VM controller records on each refusal, and the
  VM status updates of its syncs.
- Scheduled: `lifecycle.go` `updateStatus` sets the VMI `Scheduling` once its pod exists
  and `Scheduled`, with `status.nodeName` and the `kubevirt.io/nodeName` label, once the
  pod is ready on a node (KWOK makes a scheduled pod ready at once); each phase change
  stamped (`pkg/controller/controller.go` `SetVMIPhaseTransitionTimestamp`).
- Running: virt-handler on that node (`pkg/virt-handler/vm.go`
  `calculateVmPhaseForStatusReason`) once the domain runs; a client of its own on each
  node, so neither workers nor virt-controller's bucket bound it.
- Shut down: a VMI deleted while it runs has its domain shut down by virt-handler, which
  then reports it Succeeded (Failed if it never ran; `vm.go`, as `sim.handler` plays it),
  and only then do the VMI's finalizers go — gpu-binder's once its records are closed.

VMIs have no status subresource (virt-operator's `NewVirtualMachineInstanceCrd`), so each
report is a merge patch of the VMI; with no KubeVirt webhook here, nothing reverts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpu_binder.api.kubevirt import KUBEVIRT_API_VERSION
from gpu_binder.api.pod import Pod
from gpu_binder.client.errors import ApiError, NotFound
from gpu_binder.kube import KubeClient
from gpu_binder.sim.launcher import render_launcher_pod
from gpu_binder.sim.ratelimit import ItemBackoff, TokenBucket

NODE_NAME_LABEL = "kubevirt.io/nodeName"
MERGE_PATCH = "application/merge-patch+json"
# virt-controller's defaults (module docstring).
VM_CONTROLLER_THREADS = 3
VMI_CONTROLLER_THREADS = 10
CONTROLLER_QPS = 200.0
CONTROLLER_BURST = 400


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
    client: KubeClient,
    vmi: dict[str, Any],
    refused: list[str],
    requeue: Requeue,
    controller: VirtController,
) -> tuple[dict[str, Any], float]:
    """The VM controller's create, again after each refusal: the VMI as stored, and when
    its first create was sent (`time.perf_counter`)."""
    path, key = vmis_path(vmi["metadata"]["namespace"]), _key(vmi)
    return await _create(client, path, vmi, key, refused, requeue, controller, controller.vm)


async def create_launcher_pod(
    client: KubeClient,
    vmi: dict[str, Any],
    refused: list[str],
    requeue: Requeue,
    controller: VirtController,
) -> dict[str, Any]:
    """virt-controller's launcher pod for the stored VMI, again after each refusal."""
    pod, key = render_launcher_pod(vmi), _key(vmi)  # the pod's name is generated
    path = pods_path(vmi["metadata"]["namespace"])
    created, _ = await _create(client, path, pod, key, refused, requeue, controller, controller.vmi)
    return created


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


async def _create(
    client: KubeClient,
    path: str,
    body: dict[str, Any],
    key: str,
    refused: list[str],
    requeue: Requeue,
    controller: VirtController,
    workers: Workers,
) -> tuple[dict[str, Any], float]:
    """A sync of `key` creating `body` on one of the controller's threads; a refusal frees
    the thread and queues the key again after its backoff."""
    first: float | None = None
    while True:
        async with workers.sync():
            if first is None:
                first = time.perf_counter()
            try:
                created = await controller.request(client, "POST", path, body)
            except ApiError as e:
                refused.append(e.message)
            else:
                requeue.succeeded(key)
                return created, first
        await asyncio.sleep(requeue.after_failure(key))


async def report_scheduled(client: KubeClient, pod: Pod, controller: VirtController) -> None:
    """virt-controller's Scheduled (node and label, a sync of the VMI controller), then
    virt-handler's Running, for the VMI of a launcher pod the scheduler placed."""
    name, node = pod.vmi_name, pod.node_name
    if not name or not node:
        return
    path = f"{vmis_path(pod.metadata.namespace)}/{name}"
    stamps: list[dict[str, str]] = []
    for phase in ("Scheduled", "Running"):
        stamps.append({"phase": phase, "phaseTransitionTimestamp": _now()})
        status: dict[str, Any] = {"phase": phase, "phaseTransitionTimestamps": list(stamps)}
        patch: dict[str, Any] = {"status": status}
        try:
            if phase == "Scheduled":
                status["nodeName"] = node
                patch["metadata"] = {"labels": {NODE_NAME_LABEL: node}}
                async with controller.vmi.sync():
                    await controller.request(client, "PATCH", path, patch, MERGE_PATCH)
            else:
                await client.request("PATCH", path, patch, content_type=MERGE_PATCH)
        except NotFound:
            return  # deleted meanwhile: nothing runs


class Workers:
    """A controller's threads: a sync holds one for its API calls (module docstring);
    0 threads: as many as there are keys."""

    def __init__(self, threads: int) -> None:
        self._free = asyncio.Semaphore(threads) if threads > 0 else None

    @contextlib.asynccontextmanager
    async def sync(self) -> AsyncIterator[None]:
        if self._free is None:
            yield
            return
        async with self._free:  # its waiters go in turn, as a workqueue's keys do
            yield


@dataclass
class VirtController:
    """virt-controller, as far as how fast it goes: its VM and VMI controllers' threads
    and its client's bucket (module docstring)."""

    vm_threads: int = VM_CONTROLLER_THREADS
    vmi_threads: int = VMI_CONTROLLER_THREADS
    qps: float = CONTROLLER_QPS
    burst: int = CONTROLLER_BURST
    vm: Workers = field(init=False)
    vmi: Workers = field(init=False)
    bucket: TokenBucket = field(init=False)

    def __post_init__(self) -> None:
        self.vm = Workers(self.vm_threads)
        self.vmi = Workers(self.vmi_threads)
        self.bucket = TokenBucket(self.qps, self.burst)

    async def request(
        self,
        client: KubeClient,
        method: str,
        path: str,
        body: dict[str, Any],
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        delay = self.bucket.reserve(time.monotonic())
        if delay > 0:
            await asyncio.sleep(delay)
        return await client.request(method, path, body, content_type=content_type)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


ENDED = ("Succeeded", "Failed")


async def shut_down(client: KubeClient, namespace: str) -> int:
    """virt-handler's part in a deletion: every VMI of the namespace being deleted that has
    not ended is reported Succeeded if it ran, else Failed (module docstring); how many."""
    ended = 0
    for vmi in (await client.request("GET", vmis_path(namespace))).get("items") or []:
        meta, status = vmi["metadata"], vmi.get("status") or {}
        if not meta.get("deletionTimestamp") or status.get("phase") in ENDED:
            continue
        phase = "Succeeded" if status.get("phase") == "Running" else "Failed"
        stamps = [
            *(status.get("phaseTransitionTimestamps") or []),
            {"phase": phase, "phaseTransitionTimestamp": _now()},
        ]
        patch = {"status": {"phase": phase, "phaseTransitionTimestamps": stamps}}
        with contextlib.suppress(NotFound):
            path = f"{vmis_path(namespace)}/{meta['name']}"
            await client.request("PATCH", path, patch, content_type=MERGE_PATCH)
            ended += 1
    return ended
