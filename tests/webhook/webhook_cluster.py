"""A small cluster for the webhook's tests: classes, nodes, GPUs, VMs on MemoryClient.

The World is fed by the client's events, as the informers feed it in a real process, and
the real Reconciler answers bind requests.
"""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from gpu_binder.api.kubevirt import Node, VirtualMachine
from gpu_binder.api.types import GPUClass, GPUDevice, device_name
from gpu_binder.binder.config import Config
from gpu_binder.binder.reconciler import Reconciler
from gpu_binder.binder.world import World
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook.decision import Admitter

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
        self.client = MemoryClient(clock=lambda: T0)
        self.world = World()
        self.client.subscribe(lambda kind, ev: self.world.apply(ev))
        for name, (resource, device_id, pinning) in CLASSES.items():
            self.client.put(
                GPUClass.model_validate(
                    {
                        "metadata": {"name": name},
                        "spec": {
                            "resourceName": resource,
                            "match": {"vendorID": "0x10de", "deviceIDs": [device_id]},
                            "pinning": pinning,
                        },
                    }
                )
            )
        for node in ("node-a", "node-b", "node-c"):
            self.client.put(
                Node.from_dict(
                    {
                        "metadata": {"name": node},
                        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                    }
                )
            )

    def gpu(
        self,
        node: str,
        slot: int,
        cls: str = "h100",
        vm: VirtualMachine | None = None,
        lost: bool = False,
    ) -> GPUDevice:
        """A GPU in slot `slot` of `node`: free, or bound to `vm`."""
        pci = f"0000:{0x10 + slot:02x}:00.0"
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
        return self.client.put(
            GPUDevice.model_validate(
                {
                    "metadata": {"name": device_name(node, pci)},
                    "spec": {
                        "nodeName": node,
                        "pciAddress": pci,
                        "slot": slot,
                        "deviceID": CLASSES[cls][1],
                    },
                    "status": status,
                }
            )
        )

    def vm(self, name: str, gpus: dict[str, int]) -> VirtualMachine:
        return self.client.put(
            VirtualMachine.from_dict(
                {
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"running": True, "template": {"spec": _devices(gpus)}},
                }
            )
        )

    def admitter(self, **config: Any) -> Admitter:
        return Admitter(self.world, self.client, Config(**config), clock=lambda: T0)

    def reconciler(self) -> Reconciler:
        return Reconciler(self.client, self.world, clock=lambda: T0 + timedelta(seconds=1))


def _devices(gpus: dict[str, int]) -> dict[str, Any]:
    entries = [
        {"name": f"gpu{i}", "deviceName": CLASSES[cls][0]}
        for cls, n in gpus.items()
        for i in range(n)
    ]
    return {"domain": {"devices": {"gpus": entries}}}


def vmi_of(vm: VirtualMachine, **spec: Any) -> dict[str, Any]:
    """The VMI KubeVirt creates for vm: its template, owned by it, plus `spec` overrides."""
    template = copy.deepcopy(vm.raw["spec"]["template"]["spec"])
    owner = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "name": vm.metadata.name,
        "uid": vm.metadata.uid,
        "controller": True,
    }
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": vm.metadata.name, "namespace": NS, "ownerReferences": [owner]},
        "spec": {**template, **spec},
    }


def review(vmi: dict[str, Any], dry_run: bool = False, uid: str = "review-1") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
            "operation": "CREATE",
            "namespace": vmi["metadata"].get("namespace", NS),
            "dryRun": dry_run,
            "object": vmi,
        },
    }


def patched(response: dict[str, Any], vmi: dict[str, Any]) -> dict[str, Any]:
    """The VMI after the response's JSONPatch, applied as strictly as the API server does."""
    body = response["response"]
    assert body["allowed"], body
    assert body.get("patchType") == "JSONPatch"
    return apply_patch(vmi, orjson.loads(base64.b64decode(body["patch"])))


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` and `replace`: a missing parent, or replacing nothing, is an error."""
    out = copy.deepcopy(doc)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent: Any = out
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            if op["op"] == "add":
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[int(last)] = op["value"]
        else:
            assert op["op"] == "add" or last in parent, f"replace of missing {op['path']}"
            parent[last] = op["value"]
    return out
