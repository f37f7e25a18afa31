"""virt-controller's VMI controller: the pods of a VMI and the phases virt-controller owns
(kubevirt/kubevirt `pkg/virt-controller/watch/vmi/lifecycle.go`, `sync` and
`updateStatus`).

- A VMI not yet processed (Pending) with no pod gets one: its virt-launcher pod, or the
  WaitForFirstConsumer temporary pod while a DataVolume of it waits for its first consumer
  (`RenderLaunchManifestNoVm`); both rendered from the VMI as it is then (sim.launcher),
  and created through pod admission (the API server's mutating webhooks: `admit_pod`),
  whose denial is a failed sync, retried with the workqueue's backoff. Once no DataVolume
  waits any more the temporary pods are deleted (`cleanupWaitForFirstConsumerTemporaryPods`),
  and the launcher pod is rendered once they are populated.
- Phases: Pending → Scheduling once its launcher pod exists; Scheduling → Scheduled, with
  `status.nodeName` the pod's node, once the pod is ready, or → Failed when the pod is
  down or gone; a Scheduled or Running VMI whose pod is gone → Failed (a patch, without
  a transition time: `prepareVMIPatch`); a deleted VMI's pods are deleted
  (`deleteAllMatchingPods`), and a Pending one being deleted → Failed.
- A final VMI with no pod left loses virt-api's foreground finalizer.

Before anything else a VMI gets the API version annotations, in a write of their own
(vmi.go, `execute`): a pass the VM controller's affinity sync may win.

Times are stamped by virt-controller's clock (sim.clocks). Left out, as nothing here reads
them and each would be a VMI write of its own: the `kubevirt.io/nodeName` label KubeVirt
adds with Scheduled (the sim writes a VMI's status and metadata apart), and
`status.activePods` (`setActivePods`, a pod uid → node map rewritten as pods come, get a
node and go).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, cast

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.client.errors import AlreadyExists, ApiError, NotFound
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.clocks import CONTROLLER, Clocks
from gpu_binder.sim.fieldmanagers import writes_as
from gpu_binder.sim.launcher import is_temp_pod, name_pod, render_launcher_pod
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.ratelimit import ItemBackoff
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.storage import Storage
from gpu_binder.sim.vmistatus import (
    FOREGROUND_FINALIZER,
    is_receiver,
    observed,
    with_api_version,
    with_phase,
)

# Pod admission: the pod as admitted (patched), or why it was denied.
AdmitPod = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | str]]

ENDED = ("Succeeded", "Failed")


async def admit_unchanged(pod: dict[str, Any]) -> dict[str, Any] | str:
    """No pod webhook: every pod is admitted as rendered."""
    return pod


class VMIController:
    def __init__(
        self,
        client: MemoryClient,
        clocks: Clocks,
        storage: Storage,
        admit_pod: AdmitPod | None = None,
        rng: random.Random | None = None,
        *,
        waits: Callable[[VirtualMachineInstance], bool] | None = None,
    ) -> None:
        """`waits(vmi)`: whether another controller's write to the VMI lands before this
        one renders its first pod (the race of sim.kubevirt); None: none does."""
        self.client = client
        self.clocks = clocks
        self.storage = storage
        self.admit_pod = admit_pod or admit_unchanged
        self.rng = rng or random.Random(0)
        self.waits = waits
        self.pods_created: Counter[str] = Counter()  # "launcher" / "temporary"
        self.pod_denials: list[tuple[str, str]] = []
        self._dirty: set[str] = set()
        self._backoff = ItemBackoff()
        # Pods by the uid of their VMI controller owner, in creation order.
        self._pods_of: dict[str, dict[str, int]] = {}
        self._serial = 0
        for pod in client.objects(Pod):
            self._on_pod(pod, deleted=False)
        for vmi in client.objects(VirtualMachineInstance):
            self._dirty.add(vmi.key)
        client.subscribe(self._on_event, (VirtualMachineInstance, Pod))

    def dirty(self, key: str) -> None:
        self._dirty.add(key)

    @writes_as("virt-controller")
    async def step(self) -> int:
        now = self.clocks.clock()
        self._dirty |= self._backoff.due(now)
        writes = 0
        for key in sorted(self._dirty):
            self._dirty.discard(key)
            writes += await self._sync(key, now)
        return writes

    # --- sync ---------------------------------------------------------------------------

    async def _sync(self, key: str, now: datetime) -> int:
        namespace, _, name = key.partition("/")
        vmi = self.client.peek(VirtualMachineInstance, name, namespace)
        if vmi is None:
            self._backoff.drop(key)
            return 0
        if not observed(vmi):
            # vmi.go execute: the first write to a VMI not seen at this API version, alone.
            return await self._observe(vmi)
        pods = self._pods(vmi)
        current = _current(vmi, pods)
        volumes = self.storage.state(vmi.raw)
        writes = 0
        failed = False
        if vmi.being_deleted:
            for pod in pods:
                if pod.metadata.deletion_timestamp is not None and not pod.ended:
                    continue
                writes += await self._delete_pod(pod)
        elif vmi.phase not in ENDED and not is_receiver(vmi):
            if current is None:
                if vmi.phase in ("", "Pending"):
                    if not volumes.ready and not volumes.waiting:
                        # A DataVolume populates: look again once it is ready.
                        if volumes.ready_at is not None:
                            self._backoff.wake(key, volumes.ready_at)
                    elif self.waits is None or not self.waits(vmi):
                        result = await self._create_pod(vmi, temp=volumes.waiting)
                        failed = result < 0
                        writes += max(result, 0)
            elif not volumes.waiting:
                for pod in pods:
                    if is_temp_pod(pod.raw) and pod.phase in ("Running", "Succeeded", "Failed"):
                        writes += await self._delete_pod(pod, grace=0)
        if failed:
            self._backoff.failed(key, now)
        else:
            self._backoff.forget(key)
        pods = self._pods(vmi) if writes else pods
        return writes + await self._update_status(vmi, _current(vmi, pods), pods, volumes.waiting)

    async def _create_pod(self, vmi: VirtualMachineInstance, temp: bool) -> int:
        """1 when created, 0 when nothing was, -1 on a denial (a failed sync)."""
        raw = render_launcher_pod(vmi.raw, temp=temp)
        answer = await self.admit_pod(raw)
        if isinstance(answer, str):
            self.pod_denials.append((vmi.key, answer))
            return -1
        try:
            await self.client.create(Pod.from_dict(name_pod(answer, self.rng)))
        except AlreadyExists:
            return 0  # a name the API server would not have given twice: next sync
        except ApiError as e:
            self.pod_denials.append((vmi.key, str(e)))
            return -1
        self.pods_created["temporary" if temp else "launcher"] += 1
        return 1

    async def _delete_pod(self, pod: Pod, grace: int | None = None) -> int:
        try:
            await self.client.delete(
                Pod, pod.metadata.name, pod.metadata.namespace, grace_period_seconds=grace
            )
        except NotFound:
            return 0
        return 1

    async def _update_status(
        self,
        vmi: VirtualMachineInstance,
        pod: Pod | None,
        pods: list[Pod],
        waiting: bool,
    ) -> int:
        phase, node, stamped = vmi.phase, None, True
        launcher = pod is not None and not is_temp_pod(pod.raw)
        if vmi.phase in ("", "Pending"):
            if launcher:
                phase = "Scheduling"
            elif vmi.being_deleted:
                phase = "Failed"
            elif is_receiver(vmi):
                phase = "WaitingForSync"
            else:
                phase = "Pending"
                if waiting and pod is not None and _down(pod):
                    phase = "Failed"
        elif vmi.phase == "Scheduling":
            if pod is not None and launcher:
                if _ready(pod) and not vmi.being_deleted:
                    phase, node = "Scheduled", pod.node_name
                elif _down(pod):
                    phase = "Failed"
            else:
                phase = "Failed"
        elif vmi.phase in ("Scheduled", "Running"):
            if not launcher:
                phase, stamped = "Failed", False
        elif (vmi.phase == "WaitingForSync" and vmi.being_deleted) or (
            vmi.phase in ENDED and not pods
        ):
            return await self._drop_finalizer(vmi)
        if phase == vmi.phase and node is None:
            return 0
        now = self.clocks.now(CONTROLLER) if stamped else None
        uid, before = vmi.metadata.uid, vmi.phase

        def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.metadata.uid != uid or current.phase != before:
                return None
            return with_phase(current, phase, now, node=node)

        written = await modify(
            self.client,
            VirtualMachineInstance,
            vmi.metadata.name,
            vmi.metadata.namespace,
            change,
            status=True,
        )
        return 0 if written is None else 1

    async def _observe(self, vmi: VirtualMachineInstance) -> int:
        uid = vmi.metadata.uid

        def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.metadata.uid != uid or observed(current):
                return None
            return cast(VirtualMachineInstance, with_api_version(current))

        meta = vmi.metadata
        written = await modify(
            self.client, VirtualMachineInstance, meta.name, meta.namespace, change
        )
        return 0 if written is None else 1

    async def _drop_finalizer(self, vmi: VirtualMachineInstance) -> int:
        if FOREGROUND_FINALIZER not in vmi.metadata.finalizers:
            return 0
        uid = vmi.metadata.uid

        def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if (
                current.metadata.uid != uid
                or FOREGROUND_FINALIZER not in current.metadata.finalizers
            ):
                return None
            raw = wire(current)
            raw["metadata"]["finalizers"] = [
                f for f in current.metadata.finalizers if f != FOREGROUND_FINALIZER
            ]
            return VirtualMachineInstance.from_dict(raw)

        written = await modify(
            self.client, VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace, change
        )
        return 0 if written is None else 1

    def _pods(self, vmi: VirtualMachineInstance) -> list[Pod]:
        """The VMI's pods (controlled by it), oldest first."""
        found = self._pods_of.get(vmi.metadata.uid) or {}
        out = []
        for key in sorted(found, key=found.__getitem__):
            namespace, _, name = key.partition("/")
            pod = self.client.peek(Pod, name, namespace)
            if pod is not None:
                out.append(pod)
        return out

    # --- what the store tells the controller ---------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is VirtualMachineInstance:
            self._dirty.add(event.object.key)
        elif kind is Pod:
            self._on_pod(event.object, deleted=event.type == "DELETED")

    def _on_pod(self, pod: Pod, deleted: bool) -> None:
        owner = pod.metadata.owner("VirtualMachineInstance")
        if owner is None or not owner.controller:
            return
        pods = self._pods_of.setdefault(owner.uid, {})
        if deleted:
            pods.pop(pod.key, None)
            if not pods:
                del self._pods_of[owner.uid]
        elif pod.key not in pods:
            self._serial += 1
            pods[pod.key] = self._serial
        if not deleted and pod.node_name and is_temp_pod(pod.raw):
            vmi = self.client.peek(VirtualMachineInstance, owner.name, pod.metadata.namespace)
            if vmi is not None and vmi.metadata.uid == owner.uid:
                self.storage.consumer_scheduled(vmi.raw)
        self._dirty.add(f"{pod.metadata.namespace}/{owner.name}")


def _current(vmi: VirtualMachineInstance, pods: list[Pod]) -> Pod | None:
    """The most recent pod, on the VMI's node once it has one (controller.go,
    CurrentVMIPod)."""
    found = None
    for pod in pods:
        if vmi.node_name and pod.node_name != vmi.node_name:
            continue
        found = pod
    return found


def _ready(pod: Pod) -> bool:
    if pod.phase != "Running" or pod.metadata.deletion_timestamp is not None:
        return False
    conditions = (pod.raw.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _down(pod: Pod) -> bool:
    """Ended or going down (controller.IsPodDownOrGoingDown)."""
    return pod.ended or pod.metadata.deletion_timestamp is not None
