"""permittedHostDevices side effects: an operator's entry that makes virt-handler serve a
`pinning: Device` class's GPUs a second time, and a list written into a KubeVirt CR that
had none (which turns "every device" into "the listed devices")."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.meta import Condition
from gpu_binder.api.types import GPUClass

from .cluster import H100_RESOURCE, Cluster

POOL = {"pciVendorSelector": "10DE:2330", "resourceName": "nvidia.com/H100_POOL"}
HOST_DEVICES = "KubeVirtHostDevices"


def install_kubevirt(cluster: Cluster, configuration: dict[str, Any]) -> None:
    cluster.client.put(
        KubeVirt.from_dict(
            {
                "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                "spec": {"configuration": configuration},
            }
        )
    )


def served_too(cluster: Cluster, entry: dict[str, Any] = POOL) -> None:
    install_kubevirt(cluster, {"permittedHostDevices": {"pciHostDevices": [entry]}})


def condition(cluster: Cluster, type_: str, name: str = "h100") -> Condition | None:
    cls = cluster.client.peek(GPUClass, name)
    assert cls is not None
    return next((c for c in cls.status.conditions if c.type == type_), None)


# --- an operator's entry serving a Device class's GPUs again ----------------------------


async def test_a_device_class_whose_gpus_an_operator_entry_serves_again_is_not_ready(
    cluster: Cluster,
) -> None:
    served_too(cluster)
    cluster.node("node-a")
    await cluster.settle()
    ready = condition(cluster, "Ready")
    assert ready is not None and ready.status == "False"
    assert ready.reason == "ServedByKubeVirt"
    assert "10DE:2330" in ready.message and "nvidia.com/H100_POOL" in ready.message


async def test_the_class_refused_is_an_event_on_the_class_said_once(cluster: Cluster) -> None:
    served_too(cluster)
    cluster.node("node-a")
    for _ in range(3):
        await cluster.settle_after(seconds=31)
    [event] = cluster.events_of("h100", "GPUClassRefused")
    assert event.kind == "GPUClass" and event.type == "Warning"


async def test_a_class_served_twice_binds_no_new_order_and_says_why(cluster: Cluster) -> None:
    served_too(cluster)
    cluster.node("node-a")
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    assert cluster.set_of("vm") == []
    [event] = cluster.events_of("vm", "GPUUnplaceable")
    assert "externalResourceProvider" in event.message


async def test_a_class_served_twice_answers_a_request_with_the_reason(cluster: Cluster) -> None:
    served_too(cluster)
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("vm", 1)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert answer.devices == () and "nvidia.com/H100_POOL" in answer.message


async def test_a_running_vmi_of_a_class_served_twice_keeps_its_gpus(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    served_too(cluster)
    await cluster.settle_after(minutes=5)
    assert cluster.set_of("vm") == devices


async def test_an_entry_with_external_resource_provider_serves_nothing_again(
    cluster: Cluster,
) -> None:
    served_too(cluster, {**POOL, "externalResourceProvider": True})
    cluster.node("node-a")
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 1
    ready = condition(cluster, "Ready")
    assert ready is not None and ready.status == "True"


async def test_an_entry_of_another_device_id_serves_nothing_again(cluster: Cluster) -> None:
    served_too(cluster, {"pciVendorSelector": "10DE:20B5", "resourceName": "nvidia.com/A100"})
    cluster.node("node-a")
    await cluster.settle()
    ready = condition(cluster, "Ready")
    assert ready is not None and ready.status == "True"


async def test_a_node_pinned_class_may_be_served_by_kubevirts_own_plugin(
    cluster: Cluster,
) -> None:
    """Under `pinning: Node` another plugin serves the class by count: that is the design."""
    cluster.gpu_class(pinning="Node")
    served_too(cluster, {"pciVendorSelector": "10DE:2330", "resourceName": H100_RESOURCE})
    cluster.node("node-a")
    await cluster.settle()
    ready = condition(cluster, "Ready")
    assert ready is not None and ready.status == "True"


async def test_the_class_is_served_again_once_the_entry_is_fixed(cluster: Cluster) -> None:
    served_too(cluster)
    cluster.node("node-a")
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    served_too(cluster, {**POOL, "externalResourceProvider": True})
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 1
    ready = condition(cluster, "Ready")
    assert ready is not None and ready.status == "True"


# --- a list written into a CR that had none ----------------------------------------------


async def test_a_list_written_into_a_kubevirt_cr_that_had_none_is_said_on_every_class(
    cluster: Cluster,
) -> None:
    install_kubevirt(cluster, {})
    cluster.node("node-a", 1)
    await cluster.settle()
    said = condition(cluster, HOST_DEVICES)
    assert said is not None and said.status == "True" and said.reason == "ListCreated"
    assert "only the host devices listed" in said.message
    [event] = cluster.events_of("kubevirt", "GPUPermittedHostDevicesCreated")
    assert event.kind == "KubeVirt" and event.type == "Warning"


async def test_a_kubevirt_cr_that_had_a_list_is_said_nothing_of(cluster: Cluster) -> None:
    install_kubevirt(cluster, {"permittedHostDevices": {"pciHostDevices": []}})
    cluster.node("node-a", 1)
    await cluster.settle()
    assert condition(cluster, HOST_DEVICES) is None
    assert cluster.events_of("kubevirt", "GPUPermittedHostDevicesCreated") == []
