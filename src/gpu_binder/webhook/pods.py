"""The pod pin (DESIGN §4): every pod that carries a VMI's GPUs is held on its set's node.

The VMI's own affinity is no pin. KubeVirt renders the virt-launcher pod and the
WaitForFirstConsumer temporary pod from the VMI (`pkg/virt-controller/services/template.go`
`renderLaunchManifest`; the temporary pod from `watch/vmi/lifecycle.go` through
`RenderLaunchManifestNoVm`), copying the VMI's affinity as it is at that moment; with
`vmRolloutStrategy: LiveUpdate`, KubeVirt's default, the VM controller replaces that
affinity with the VM template's on its next sync (`watch/vm/vm.go`
`handleAffinityChangeRequest` → `VMIAffinityPatch`), which races the pod's rendering, and
KubeVirt's VMI update admitter refuses gpu-binder's patching it back. Slot resource names
repeat on every node, so a pod rendered without the pin would be scheduled anywhere and
handed another tenant's GPU at the same slot. A pod's affinity cannot change once created:
pinned at CREATE, it stays.

What a pod carries of gpu-binder's: slot resources (of `pinning: Device` classes, which the
VMI webhook rewrote the VMI's entries to) and the resourceName of `pinning: Node` classes
(another plugin serves those by count on the node). A pod with neither passes untouched.
Whose they are: the VMI of the pod's controller reference (else of its created-by label),
by uid, and that VMI's order (its VM, by the uid the VMI's owner reference names, or the
VMI itself); the set is the devices bound to that order, by uid. The pod is pinned to the
set's node and may hold only the set's slots, each once, and no more GPUs of a Node class
than the set holds there. Anything else is refused: a slot not of the set is another VM's
GPU on whatever node the pod lands on. A refusal is safe: virt-controller records it on
the VMI as an Event and creates the pod again later.

`decide` reads the world only (the embedded cluster's driver). `admit`, for the HTTPS
server, reads past this replica's cache, which may lag: the VMI is created milliseconds
before its pod, and the binding the leader just wrote (or a move of the set) may not have
reached this replica's watch yet. So the VMI is read from the API server when the cache
lacks it (or holds an older VMI of the same name), and the set's devices are always read
fresh: the candidates are the cached set plus the devices the VMI's devices annotation
names, and only those the API server says are bound to the order count (in the leader, a
device it wrote itself is read from that write's response, World.written_device). The annotation is
only a hint (a tenant may write it): a wrong one can get its own pod refused, never pinned
to a node its set is not on.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.meta import controller_or_first
from gpu_binder.api.pod import Pod
from gpu_binder.api.slots import device_slot, is_slot
from gpu_binder.api.types import DEVICES_ANNOTATION, GPUClass, GPUDevice
from gpu_binder.binder import Config
from gpu_binder.cache.world import World
from gpu_binder.client.errors import NotFound
from gpu_binder.client.interface import Client
from gpu_binder.webhook.patch import affinity_ops
from gpu_binder.webhook.pinning import held_by
from gpu_binder.webhook.review import AdmissionRequest, allowed, denied, parse_review

log = logging.getLogger(__name__)

POD_KIND = "Pod"
# Devices a VMI's annotation may name for a fresh read: more than any node holds GPUs, so
# a tenant writing thousands of names costs one bounded batch of reads.
MAX_HINTED = 64


@dataclass(frozen=True, slots=True)
class Holdings:
    """What a pod holds of gpu-binder's: units per slot resource, and per Node class."""

    slots: dict[str, int]
    by_class: dict[str, int]

    def __bool__(self) -> bool:
        return bool(self.slots or self.by_class)


def holdings(resources: Mapping[str, int], class_by_resource: Mapping[str, GPUClass]) -> Holdings:
    slots = {n: k for n, k in resources.items() if is_slot(n)}
    by_class: Counter[str] = Counter()
    for name, units in resources.items():
        cls = class_by_resource.get(name)
        if cls is not None and cls.spec.pinning == "Node":
            by_class[cls.metadata.name] += units
    return Holdings(slots, dict(by_class))


def order_of(vmi: VirtualMachineInstance) -> tuple[str, str, str]:
    """(key, uid, what) of the order a VMI runs for: its VM as the VMI's owner reference
    names it, or the VMI itself; `what` names it for a tenant."""
    owner = vmi.metadata.owner("VirtualMachine")
    if owner is not None:
        return vmi.order_key, owner.uid, f"VM {vmi.order_key}"
    return vmi.key, vmi.metadata.uid, f"VMI {vmi.key}"


class PodPinner:
    """Decides AdmissionReviews of Pod CREATE from the binder's world (module docstring)."""

    def __init__(
        self,
        world: World,
        config: Config | None = None,
        clock: Callable[[], datetime] | None = None,
        *,
        client: Client | None = None,
        leading: Callable[[], bool] | None = None,
    ) -> None:
        self.world = world
        self.config = config or Config()
        # Only measures how long reads past the cache took, in the log.
        self.clock = clock or (lambda: datetime.now(UTC))
        # None: admit reads the world only, as decide does.
        self.client = client
        # Whether this process leads, so that the devices its own writes returned are as
        # the API server holds them (World.written_device); None: always read them.
        self.leading = leading

    def decide(self, review: object) -> dict[str, Any]:
        """The response from the world alone; raises BadReview for malformed input."""
        request = review if isinstance(review, AdmissionRequest) else parse_review(review)
        try:
            found = self._holdings(request)
            if isinstance(found, dict):
                return found
            pod, held = found
            vmi = self._cached_vmi(request.namespace, pod)
            candidates = self.world.devices.set_of(order_of(vmi)[0]) if vmi else []
            return self._pin(request, pod, held, vmi, candidates)
        except Exception as e:
            return self._failed(request, e)

    async def admit(self, review: object) -> dict[str, Any]:
        """The response, reading the VMI and the set past the cache; raises BadReview for
        malformed input (the server answers 400), denies on any other failure."""
        request = parse_review(review)
        if self.client is None:
            return self.decide(request)
        try:
            found = self._holdings(request)
            if isinstance(found, dict):
                return found
            pod, held = found
            started = self.clock()
            vmi = self._cached_vmi(request.namespace, pod) or await self._read_vmi(
                request.namespace, pod
            )
            candidates = await self._read_set(vmi) if vmi is not None else []
            log.debug("pod of VMI %s: read its set in %s", pod.vmi_name, self.clock() - started)
            return self._pin(request, pod, held, vmi, candidates)
        except Exception as e:
            return self._failed(request, e)

    # --- deciding ------------------------------------------------------------------------

    def _holdings(self, request: AdmissionRequest) -> dict[str, Any] | tuple[Pod, Holdings]:
        """The pod and what it holds, or the response when there is nothing to decide."""
        if request.operation != "CREATE" or request.kind != POD_KIND or request.object is None:
            return allowed(request.uid)
        pod = Pod.from_dict(request.object)
        held = holdings(pod.resources, self.world.class_by_resource)
        if not held:
            return allowed(request.uid)
        # Node-class GPUs in an excluded namespace are its own business, as its VMIs are;
        # slots are nobody's to name, in any namespace.
        if request.namespace in self.config.excluded_namespaces and not held.slots:
            return allowed(request.uid)
        return pod, held

    def _pin(
        self,
        request: AdmissionRequest,
        pod: Pod,
        held: Holdings,
        vmi: VirtualMachineInstance | None,
        candidates: Iterable[GPUDevice],
    ) -> dict[str, Any]:
        holds = _listed(held)
        if not pod.vmi_uid:
            return self._deny(
                request,
                f"the pod holds GPUs ({holds}) but belongs to no VirtualMachineInstance: only "
                "the pods KubeVirt creates for a VM's instance may hold gpu-binder's GPUs",
            )
        if vmi is None:
            name = pod.vmi_name or pod.vmi_uid
            return self._deny(
                request,
                f"VirtualMachineInstance {request.namespace}/{name} is not known to gpu-binder "
                "yet; KubeVirt will retry",
            )
        key, uid, what = order_of(vmi)
        devices = [d for d in candidates if held_by(d, key, uid)]
        if not devices:
            return self._deny(
                request,
                f"{what} holds no GPUs in gpu-binder, so its pod may not hold {holds}; "
                "restart the VM for gpu-binder to bind its GPUs",
            )
        nodes = sorted({d.spec.node_name for d in devices})
        if len(nodes) > 1:
            return self._deny(
                request,
                f"the GPUs of {what} are on several nodes ({', '.join(nodes)}) while "
                "gpu-binder moves them; KubeVirt will retry",
            )
        node = nodes[0]
        foreign = foreign_slots(held.slots, devices)
        if foreign:
            return self._deny(
                request,
                f"the pod holds slot resource {', '.join(foreign)}, which is not one of the "
                f"GPUs of {what} (on {node}): no VM can reach another's GPU",
            )
        for class_name, units in sorted(held.by_class.items()):
            have = sum(1 for d in devices if d.status.class_name == class_name)
            if units > have:
                return self._deny(
                    request,
                    f"the pod asks for {units} × {class_name} but {what} holds {have} on {node}",
                )
        bound = (request.object or {}).get("spec", {}).get("nodeName")
        if bound and bound != node:
            return self._deny(
                request, f"the pod names node {bound}, but the GPUs of {what} are on {node}"
            )
        return allowed(request.uid, affinity_ops(pod.raw, node))

    # --- finding the VMI and its set -----------------------------------------------------

    def _cached_vmi(self, namespace: str, pod: Pod) -> VirtualMachineInstance | None:
        """The pod's VMI in the cache, by uid: an older VMI of the same name is not it."""
        uid = pod.vmi_uid
        if not uid:
            return None
        if pod.vmi_name:
            vmi = self.world.vmis.get(f"{namespace}/{pod.vmi_name}")
            return vmi if vmi is not None and vmi.metadata.uid == uid else None
        # Only a created-by label (KubeVirt always adds the owner too): by uid.
        return next(
            (
                v
                for v in self.world.vmis.values()
                if v.metadata.namespace == namespace and v.metadata.uid == uid
            ),
            None,
        )

    async def _read_vmi(self, namespace: str, pod: Pod) -> VirtualMachineInstance | None:
        assert self.client is not None
        if not pod.vmi_name or not pod.vmi_uid:
            return None
        try:
            vmi = await self.client.get(VirtualMachineInstance, pod.vmi_name, namespace)
        except NotFound:
            return None
        return vmi if vmi.metadata.uid == pod.vmi_uid else None

    async def _read_set(self, vmi: VirtualMachineInstance) -> list[GPUDevice]:
        """The candidates of the VMI's set as the API server has them now (module docstring)."""
        assert self.client is not None
        names = {d.metadata.name for d in self.world.devices.set_of(order_of(vmi)[0])}
        hint = vmi.metadata.annotations.get(DEVICES_ANNOTATION, "")
        names.update(n.strip() for n in hint.split(",")[:MAX_HINTED] if n.strip())
        read = await asyncio.gather(*(self._read_device(n) for n in sorted(names)))
        return [d for d in read if d is not None]

    async def _read_device(self, name: str) -> GPUDevice | None:
        """The device as the API server holds it: this leader's own last write of it when
        the world still holds that (World.written_device, as the VMI webhook reads it),
        else read. A burst's every launcher pod read its set's devices, which the leader
        had just written, while the API server answered slowest (bench start)."""
        assert self.client is not None
        if self.leading is not None and self.leading():
            own = self.world.written_device(name)
            if own is not None:
                return own
        try:
            return await self.client.get(GPUDevice, name)
        except NotFound:
            return None

    # --- answering -----------------------------------------------------------------------

    def _deny(self, request: AdmissionRequest, message: str) -> dict[str, Any]:
        log.info("pod of %s denied: %s", _owner(request), message)
        return denied(request.uid, message)

    def _failed(self, request: AdmissionRequest, error: Exception) -> dict[str, Any]:
        log.exception("pod of %s: the pod webhook failed", _owner(request))
        return denied(
            request.uid,
            f"gpu-binder's pod webhook failed ({type(error).__name__}: {error}); "
            "KubeVirt will retry",
        )


def foreign_slots(slots: Mapping[str, int], devices: Sequence[GPUDevice]) -> list[str]:
    """Slot resources the pod holds beyond what the set's devices serve (each once)."""
    served = Counter(s for d in devices if (s := device_slot(d)))
    return sorted(n for n, units in slots.items() if units > served[n])


def _listed(held: Holdings) -> str:
    parts = [f"{n} × {s}" if n > 1 else s for s, n in sorted(held.slots.items())]
    parts += [f"{n} × {c}" for c, n in sorted(held.by_class.items())]
    return ", ".join(parts)


def _owner(request: AdmissionRequest) -> str:
    """The VMI a pod is for, as its review names it, for the log."""
    meta = (request.object or {}).get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    owners = [
        r
        for r in (refs if isinstance(refs, list) else ())
        if isinstance(r, dict) and r.get("kind") == "VirtualMachineInstance"
    ]
    ref = controller_or_first(owners, lambda r: r.get("controller") is True)
    if ref is None:
        return f"an unowned pod in {request.namespace}"
    return f"VMI {request.namespace}/{ref.get('name', '')}"
