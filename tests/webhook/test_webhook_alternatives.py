"""A VM accepting several classes (gpu.cozystack.io/classes): its entries get the devices
of whichever class its set holds, and a bind request carries the alternatives."""

from __future__ import annotations

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import CLASSES_ANNOTATION, GPUDevice
from gpu_binder.webhook.decision import NeedsRequest

from .test_webhook_admit import admit_with_binder, device_names, node_terms, on
from .webhook_cluster import L40S, Cluster, patched, review, vmi_of

A100_SLOT = "gpu.cozystack.io/10de-20b5-s{}"


def a100_class(cluster: Cluster) -> None:
    cluster.add_class("a100", "nvidia.com/GA100_A100_80GB", "0x20b5")


def a100(cluster: Cluster, node: str, slot: int, vm: VirtualMachine | None = None) -> GPUDevice:
    return cluster.gpu(node, slot, cls="a100", vm=vm)


def vm_accepting(cluster: Cluster, name: str, gpus: int, classes: str) -> VirtualMachine:
    return cluster.vm(name, {"h100": gpus}, annotations={CLASSES_ANNOTATION: classes})


async def test_entries_naming_h100_get_the_a100_set_the_vm_holds(cluster: Cluster) -> None:
    a100_class(cluster)
    vm = vm_accepting(cluster, "vm1", 2, "h100,a100")
    a100(cluster, "node-b", 4, vm=vm)
    a100(cluster, "node-b", 6, vm=vm)
    vmi = vmi_of(vm)
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    assert device_names(out) == [A100_SLOT.format(4), A100_SLOT.format(6)]
    assert node_terms(out) == [{"matchFields": [on("node-b")]}]


async def test_a_node_pinned_alternative_gets_its_own_resource_name(cluster: Cluster) -> None:
    vm = vm_accepting(cluster, "vm1", 1, "h100,l40s")
    cluster.gpu("node-c", 1, cls="l40s", vm=vm)
    vmi = vmi_of(vm)
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    # Another plugin serves l40s by count: the entry must ask for l40s, not h100.
    assert device_names(out) == [L40S]
    assert node_terms(out) == [{"matchFields": [on("node-c")]}]


async def test_a_request_carries_the_classes_the_vm_accepts(cluster: Cluster) -> None:
    a100_class(cluster)
    vm = vm_accepting(cluster, "vm1", 2, "h100, a100, nosuchclass")
    decision = cluster.admitter().decide(review(vmi_of(vm)))
    assert isinstance(decision, NeedsRequest)
    [r] = decision.request.spec.requests
    assert (r.class_name, r.count, r.alternatives) == ("h100", 2, ("h100", "a100"))


async def test_the_binder_answers_from_an_alternative_class(cluster: Cluster) -> None:
    a100_class(cluster)
    vm = vm_accepting(cluster, "vm1", 2, "h100,a100")
    a100(cluster, "node-a", 0)
    a100(cluster, "node-a", 1)
    cluster.gpu("node-b", 0)  # one h100: too few
    vmi = vmi_of(vm)
    out = patched(await admit_with_binder(cluster, review(vmi)), vmi)
    assert device_names(out) == [A100_SLOT.format(0), A100_SLOT.format(1)]
    assert node_terms(out) == [{"matchFields": [on("node-a")]}]
