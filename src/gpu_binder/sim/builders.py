"""Objects as the parts of a cluster around gpu-binder write them: GPUClasses, GPUDevices as
a node agent creates them, Nodes as a kubelet registers them, VirtualMachines, and the VMIs
KubeVirt makes of them.

One builder for the embedded cluster, the tests, the benchmarks and the dev cluster; it
only constructs (no I/O). The binder, webhook and kube packages never import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gpu_binder.agent.models import NVIDIA
from gpu_binder.api.instancetype import CLUSTER_INSTANCETYPE_KIND, INSTANCETYPE_API_VERSION
from gpu_binder.api.kubevirt import KUBEVIRT_API_VERSION, Node, VirtualMachine
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.slots import format_slot
from gpu_binder.api.types import (
    FINALIZER,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceSpec,
    GPUDeviceStatus,
    device_name,
)
from gpu_binder.sim.objects import json_copy

HOSTNAME_LABEL = "kubernetes.io/hostname"
H100_RESOURCE = "nvidia.com/GH100_H100_SXM5_80GB"
H100_DEVICE_ID = "0x2330"
# The PCI bus of a node's slot 0 (one bus per GPU).
FIRST_BUS = 0x10


def iso(t: datetime) -> str:
    """A time as the API writes it: RFC 3339 with Z for UTC."""
    return t.isoformat().replace("+00:00", "Z")


# --- GPU classes and devices -------------------------------------------------------------


def gpu_class(
    name: str,
    resource: str,
    device_id: str,
    *,
    vendor_id: str = NVIDIA,
    node_selector: Mapping[str, str] | None = None,
    **spec: Any,
) -> GPUClass:
    """A class of the GPUs of one vendor:device (on the nodes node_selector picks), ordered
    as resource; spec takes further GPUClassSpec fields, as models or in wire form:
    placement={"policy": "Spread"}, pinning="Node", cleaning="None"."""
    match: dict[str, Any] = {"vendorID": vendor_id, "deviceIDs": [device_id]}
    if node_selector:
        match["nodeSelector"] = dict(node_selector)
    body = {"resourceName": resource, "match": match, **spec}
    return GPUClass(metadata=ObjectMeta(name=name), spec=GPUClassSpec.model_validate(body))


def slot_resource(slot: int, device_id: str = H100_DEVICE_ID, vendor_id: str = NVIDIA) -> str:
    """The resource a node's device plugin serves the GPU in slot under."""
    return format_slot(vendor_id, device_id, slot)


def pci_address(slot: int, first_bus: int = FIRST_BUS) -> str:
    return f"0000:{first_bus + slot:02x}:00.0"


def gpu_device(
    node: str,
    slot: int,
    device_id: str = H100_DEVICE_ID,
    *,
    vendor_id: str = NVIDIA,
    first_bus: int = FIRST_BUS,
    finalizer: bool = False,
    status: GPUDeviceStatus | Mapping[str, Any] | None = None,
    **spec: Any,
) -> GPUDevice:
    """The GPU in slot of node, named as its agent names it (finalizer: with the device
    finalizer the agent puts on); spec takes further GPUDeviceSpec fields (model,
    numa_node, driver...), status a status in wire form or as a model."""
    pci = pci_address(slot, first_bus)
    meta = ObjectMeta(name=device_name(node, pci), finalizers=(FINALIZER,) if finalizer else ())
    device_spec = GPUDeviceSpec(
        node_name=node,
        pci_address=pci,
        slot=slot,
        vendor_id=vendor_id,
        device_id=device_id,
        **spec,
    )
    if status is None:
        return GPUDevice(metadata=meta, spec=device_spec)
    return GPUDevice(metadata=meta, spec=device_spec, status=GPUDeviceStatus.model_validate(status))


# --- nodes -------------------------------------------------------------------------------


def ready_condition(ready: bool, since: datetime, *, heartbeat: bool = False) -> dict[str, str]:
    """The Ready condition a kubelet reports, changed at since (heartbeat: last seen then)."""
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "lastTransitionTime": iso(since),
    }
    if heartbeat:
        condition["lastHeartbeatTime"] = iso(since)
    return condition


def node_status(
    since: datetime,
    allocatable: Mapping[str, int] | None = None,
    *,
    ready: bool = True,
    heartbeat: bool = False,
    capacity: bool = False,
) -> dict[str, Any]:
    """A kubelet's report: Ready (or not) since since, and its device-plugin units
    (capacity: reported as capacity too)."""
    units = {k: str(v) for k, v in sorted((allocatable or {}).items())}
    status: dict[str, Any] = {
        "conditions": [ready_condition(ready, since, heartbeat=heartbeat)],
        "allocatable": units,
    }
    if capacity:
        status["capacity"] = dict(units)
    return status


def node_object(
    name: str,
    since: datetime,
    *,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    allocatable: Mapping[str, int] | None = None,
) -> Node:
    """A Node as a kubelet registers it; allocatable holds only device-plugin units."""
    return Node.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": node_metadata(name, labels),
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": node_status(since, allocatable, ready=ready),
        }
    )


def node_metadata(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "labels": {HOSTNAME_LABEL: name, **(labels or {})}}


# --- KubeVirt ----------------------------------------------------------------------------


def devices(names: Sequence[str]) -> dict[str, Any]:
    """A domain's devices: one GPU entry per device name (a class's resourceName, or a
    slot resource)."""
    return {"gpus": [{"name": f"gpu{i}", "deviceName": n} for i, n in enumerate(names)]}


def vm_object(
    name: str,
    namespace: str,
    gpus: Sequence[str] = (),
    *,
    running: bool = True,
    run_strategy: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    instancetype: str | None = None,
    data_volume: str | None = None,
) -> VirtualMachine:
    """A VM whose template orders one GPU entry per name in gpus; run_strategy (Always,
    Halted...) replaces spec.running when given; instancetype names a cluster
    instancetype (its GPUs are then the instancetype's), data_volume a DataVolume its
    root disk is on."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    template_spec: dict[str, Any] = {"domain": {"devices": devices(gpus)}}
    if data_volume:
        template_spec["volumes"] = [{"name": "rootdisk", "dataVolume": {"name": data_volume}}]
    run = {"runStrategy": run_strategy} if run_strategy else {"running": running}
    spec: dict[str, Any] = {**run, "template": {"spec": template_spec}}
    if instancetype:
        spec["instancetype"] = {"name": instancetype, "kind": CLUSTER_INSTANCETYPE_KIND}
    return VirtualMachine.from_dict(
        {
            "apiVersion": KUBEVIRT_API_VERSION,
            "kind": "VirtualMachine",
            "metadata": meta,
            "spec": spec,
        }
    )


def cluster_instancetype(
    name: str, gpus: Sequence[str] = (), *, cpus: int = 8, memory: str = "64Gi"
) -> dict[str, Any]:
    """A VirtualMachineClusterInstancetype (wire form) giving one GPU per name in gpus."""
    spec: dict[str, Any] = {"cpu": {"guest": cpus}, "memory": {"guest": memory}}
    if gpus:
        spec["gpus"] = devices(gpus)["gpus"]
    return {
        "apiVersion": INSTANCETYPE_API_VERSION,
        "kind": CLUSTER_INSTANCETYPE_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def kubevirt_object(name: str = "kubevirt", namespace: str = "kubevirt") -> dict[str, Any]:
    """The KubeVirt CR, with an empty configuration for the binder to add to."""
    return {
        "apiVersion": KUBEVIRT_API_VERSION,
        "kind": "KubeVirt",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"configuration": {}},
    }


def owner_reference(vm: VirtualMachine) -> dict[str, Any]:
    """The ownerReference KubeVirt's VM controller puts on the VMIs it creates."""
    return {
        "apiVersion": KUBEVIRT_API_VERSION,
        "kind": "VirtualMachine",
        "name": vm.metadata.name,
        "uid": vm.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def vmi_object(
    name: str,
    namespace: str,
    gpus: Sequence[str] = (),
    *,
    owner: VirtualMachine | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A VMI (in wire form, as it goes through admission) with one GPU entry per name in
    gpus, owned by owner as KubeVirt makes them, or with no VM (its own order); spec adds
    fields to its spec (affinity...)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return _vmi(meta, {"domain": {"devices": devices(gpus)}, **spec})


def vmi_for(
    vm: VirtualMachine,
    *,
    annotations: Mapping[str, str] | None = None,
    status: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """The VMI (in wire form) KubeVirt's VM controller creates for vm: named after it,
    owned by it, with its template's labels, annotations and spec; spec's fields replace
    the template's, annotations are added, and status is what virt-handler reported."""
    template = json_copy((vm.raw.get("spec") or {}).get("template") or {})
    template_meta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "name": vm.metadata.name,
        "namespace": vm.metadata.namespace,
        "ownerReferences": [owner_reference(vm)],
    }
    for field in ("labels", "annotations"):
        if template_meta.get(field):
            meta[field] = template_meta[field]
    if annotations:
        meta["annotations"] = {**meta.get("annotations", {}), **annotations}
    return _vmi(meta, {**(template.get("spec") or {}), **spec}, status)


def _vmi(
    meta: dict[str, Any], spec: dict[str, Any], status: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": KUBEVIRT_API_VERSION,
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": spec,
    }
    if status is not None:
        raw["status"] = dict(status)
    return raw
