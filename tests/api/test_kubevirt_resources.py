"""What the binder reads of Nodes and VMs beyond GPUs: CPU, memory and accepted classes."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import CLASSES_ANNOTATION


def node(allocatable: dict[str, Any]) -> Node:
    return Node.from_dict({"metadata": {"name": "n"}, "status": {"allocatable": allocatable}})


def vm(domain: dict[str, Any], annotations: dict[str, str] | None = None) -> VirtualMachine:
    meta: dict[str, Any] = {"name": "v", "namespace": "ns"}
    if annotations is not None:
        meta["annotations"] = annotations
    return VirtualMachine.from_dict(
        {"metadata": meta, "spec": {"template": {"spec": {"domain": domain}}}}
    )


def test_a_node_reports_allocatable_cpu_and_memory_beside_its_device_units() -> None:
    n = node({"cpu": "63500m", "memory": "256Gi", "gpu.cozystack.io/10de-2330-s0": "1"})
    assert (n.cpu_milli, n.memory_bytes) == (63_500, 256 * 2**30)
    assert n.allocatable["gpu.cozystack.io/10de-2330-s0"] == 1


def test_a_node_that_does_not_say_has_no_cpu_or_memory_limit() -> None:
    n = node({"nvidia.com/x": "2"})
    assert (n.cpu_milli, n.memory_bytes) == (None, None)
    assert node({"cpu": "lots"}).cpu_milli is None


def test_a_vm_asks_for_its_resource_requests() -> None:
    v = vm({"resources": {"requests": {"cpu": "12", "memory": "16Gi"}}, "cpu": {"cores": 64}})
    assert (v.cpu_milli, v.memory_bytes) == (12_000, 16 * 2**30)


def test_without_requests_a_vm_asks_for_its_vcpus_and_guest_memory() -> None:
    v = vm({"cpu": {"sockets": 2, "cores": 4, "threads": 2}, "memory": {"guest": "32Gi"}})
    assert (v.cpu_milli, v.memory_bytes) == (16_000, 32 * 2**30)


def test_a_vm_that_says_nothing_asks_for_nothing() -> None:
    assert (vm({}).cpu_milli, vm({}).memory_bytes) == (0, 0)


def test_the_classes_annotation_lists_the_classes_a_vm_accepts() -> None:
    assert vm({}, {CLASSES_ANNOTATION: "h100, a100,,h100"}).alternatives == ("h100", "a100")
    assert vm({}).alternatives == ()


def test_the_classes_annotation_may_sit_in_the_vm_template() -> None:
    raw = {
        "metadata": {"name": "v", "namespace": "ns"},
        "spec": {
            "template": {"metadata": {"annotations": {CLASSES_ANNOTATION: "a100,l40"}}, "spec": {}}
        },
    }
    assert VirtualMachine.from_dict(raw).alternatives == ("a100", "l40")


def test_a_standalone_vmi_carries_its_own_requests_and_classes() -> None:
    vmi = VirtualMachineInstance.from_dict(
        {
            "metadata": {"name": "i", "namespace": "ns", "annotations": {CLASSES_ANNOTATION: "a"}},
            "spec": {"domain": {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}},
        }
    )
    assert (vmi.cpu_milli, vmi.memory_bytes, vmi.alternatives) == (500, 2**30, ("a",))
