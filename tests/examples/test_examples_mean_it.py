"""The example classes and VM do what their comments say, on the embedded cluster with
the binder's own passes (tests/controlplane/test_examples.py checks the API accepts them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from binder.cluster import NAMESPACE, Cluster
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import GPUClass

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


def with_class(cluster: Cluster, file: str, device_id: str) -> GPUClass:
    cls = GPUClass.model_validate(example(file))
    cluster.device_ids[cls.metadata.name] = device_id
    return cluster.client.put(cls)


def example_vm(cluster: Cluster, file: str) -> VirtualMachine:
    raw = example(file)
    raw["metadata"]["namespace"] = NAMESPACE
    return cluster.client.put(VirtualMachine.from_dict(raw))


async def test_the_h100_vm_gets_two_gpus_of_one_nvlink_domain_on_one_node() -> None:
    cluster = Cluster()
    h100 = with_class(cluster, "gpuclass-h100-sxm.yaml", "0x2330")
    assert (h100.spec.placement.policy, h100.spec.placement.topology) == ("Pack", "NVLink")
    assert h100.spec.pinning == "Device"
    # Two NVLink domains of 4 on one node; a 3-GPU VM takes 3 of the first.
    cluster.node("node-a", 8, class_name="h100", nvlink=["nvswitch-a"] * 4 + ["nvswitch-b"] * 4)
    cluster.vm("three", 3, resource=h100.spec.resource_name)
    await cluster.settle()
    example_vm(cluster, "vm-two-h100.yaml")
    await cluster.settle()
    devices = [cluster.device(n) for n in cluster.set_of("train")]
    assert len(devices) == 2
    # Not the first domain's last GPU and one of the second: both from the second.
    assert {d.spec.nvlink_domain for d in devices} == {"nvswitch-b"}


async def test_l40s_vms_spread_and_a_stopped_ones_gpus_go_back_after_ten_minutes() -> None:
    cluster = Cluster()
    l40s = with_class(cluster, "gpuclass-l40s.yaml", "0x26b9")
    assert l40s.spec.vfio_binding == "Agent"
    pool = dict(l40s.spec.match.node_selector)
    for name in ("node-a", "node-b"):
        cluster.node(name, 4, class_name="l40s", labels=pool)
    cluster.node("node-c", 4, class_name="l40s")  # not in the pool: never used
    for vm in ("one", "two"):
        cluster.vm(vm, 1, running=True, resource=l40s.spec.resource_name)
    await cluster.settle()
    assert {cluster.node_of("one"), cluster.node_of("two")} == {"node-a", "node-b"}
    cluster.start("one")
    await cluster.settle()
    cluster.finish("one")
    cluster.set_running("one", False)
    await cluster.settle()
    await cluster.settle_after(minutes=9)
    assert len(cluster.set_of("one")) == 1, "kept within releaseAfterStopped"
    await cluster.settle_after(minutes=2)
    assert cluster.set_of("one") == []
