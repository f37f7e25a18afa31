"""A small cluster for the webhook's tests: classes, nodes, GPUs, VMs on MemoryClient.

The World is fed by the client's events, as the informers feed it in a real process, and
the real Reconciler answers bind requests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import GPUBindRequest, GPUClass, GPUDevice
from gpu_binder.binder.config import Config
from gpu_binder.binder.reconciler import Reconciler
from gpu_binder.cache import World
from gpu_binder.sim.admission import outcome
from gpu_binder.sim.binderhost import BinderHost
from gpu_binder.sim.builders import gpu_class, gpu_device, node_object, vm_object, vmi_for
from gpu_binder.webhook.decision import Admitter
from gpu_binder.webhook.review import review_request

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NS = "tenant-a"
H100 = "nvidia.com/GH100_H100_SXM5_80GB"
L40S = "nvidia.com/AD102GL_L40S"
CLASSES = {
    # name: (resourceName, deviceID, pinning)
    "h100": (H100, "0x2330", "Device"),
    "l40s": (L40S, "0x26b9", "Node"),
}


class Cluster:
    def __init__(self) -> None:
        self.host = BinderHost(lambda: T0)
        self.client = self.host.client
        self.admitters: list[Admitter] = []
        for name, (resource, device_id, pinning) in CLASSES.items():
            self.add_class(name, resource, device_id, pinning=pinning)
        for node in ("node-a", "node-b", "node-c"):
            self.client.put(node_object(node, T0))

    @property
    def world(self) -> World:
        return self.host.world

    def add_class(self, name: str, resource: str, device_id: str, **spec: Any) -> GPUClass:
        return self.client.put(gpu_class(name, resource, device_id, **spec))

    def gpu(
        self,
        node: str,
        slot: int,
        cls: str = "h100",
        vm: VirtualMachine | None = None,
        lost: bool = False,
    ) -> GPUDevice:
        """A GPU of class cls in slot `slot` of `node`: free, or bound to `vm`."""
        status: dict[str, Any] = {"className": cls, "phase": "Available"}
        if vm is not None:
            ref = {
                "namespace": vm.metadata.namespace,
                "name": vm.metadata.name,
                "uid": vm.metadata.uid,
            }
            status = {
                "className": cls,
                "phase": "Bound",
                "binding": {"vm": ref, "boundAt": T0, "reason": "Order"},
            }
        if lost:
            status["phase"] = "Lost"
        found = self.client.peek(GPUClass, cls)
        assert found is not None, f"no class {cls}"
        device_id = found.spec.match.device_ids[0]
        return self.client.put(gpu_device(node, slot, device_id, status=status))

    def vm(
        self, name: str, gpus: dict[str, int], annotations: dict[str, str] | None = None
    ) -> VirtualMachine:
        """A VM ordering gpus (class: count), running."""
        names = [self.resource_of(c) for c, n in gpus.items() for _ in range(n)]
        return self.client.put(vm_object(name, NS, names, annotations=annotations))

    def resource_of(self, cls: str) -> str:
        found = self.client.peek(GPUClass, cls)
        assert found is not None, f"no class {cls}"
        return found.spec.resource_name

    def admitter(self, **config: Any) -> Admitter:
        admitter = Admitter(self.world, self.client, Config(**config), clock=lambda: T0)
        self.admitters.append(admitter)
        return admitter

    async def requests_left(self) -> list[GPUBindRequest]:
        """The bind requests left once every admitter finished deleting what it answered."""
        for admitter in self.admitters:
            await admitter.drain()
        return self.client.objects(GPUBindRequest)

    def reconciler(self) -> Reconciler:
        return self.host.reconciler(clock=lambda: T0 + timedelta(seconds=1))


def vmi_of(vm: VirtualMachine, **spec: Any) -> dict[str, Any]:
    """The VMI KubeVirt creates for vm: its template, owned by it, plus `spec` overrides."""
    return vmi_for(vm, **spec)


def review(vmi: dict[str, Any], dry_run: bool = False, uid: str = "review-1") -> dict[str, Any]:
    return review_request(
        vmi, uid=uid, namespace=vmi["metadata"].get("namespace", NS), dry_run=dry_run
    )


def patched(response: dict[str, Any], vmi: dict[str, Any]) -> dict[str, Any]:
    """The VMI after the response's JSONPatch, applied as strictly as the API server does."""
    body = response["response"]
    assert body["allowed"], body
    assert body.get("patchType") == "JSONPatch"
    result = outcome(vmi, response)
    assert isinstance(result, dict)
    return result
