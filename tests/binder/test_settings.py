"""Settings: the KubeVirt CR's permitted host devices, rendered only when they change."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kinds import KubeVirt

from .cluster import A100, A100_DEVICE_ID, A100_RESOURCE, H100_RESOURCE, Cluster


def install_kubevirt(cluster: Cluster) -> None:
    cluster.client.put(
        KubeVirt.from_dict(
            {
                "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                "spec": {"configuration": {"developerConfiguration": {"featureGates": ["GPU"]}}},
            }
        )
    )


def kubevirt(cluster: Cluster) -> KubeVirt:
    kv = cluster.client.peek(KubeVirt, "kubevirt", "kubevirt")
    assert kv is not None
    return kv


def permitted(cluster: Cluster) -> list[dict[str, Any]]:
    config = kubevirt(cluster).raw["spec"]["configuration"]
    devices: list[dict[str, Any]] = config["permittedHostDevices"]["pciHostDevices"]
    return devices


async def test_device_pinned_classes_permit_one_slot_resource_per_slot(cluster: Cluster) -> None:
    install_kubevirt(cluster)
    cluster.node("node-a", 2)
    cluster.node("node-b", 3)
    await cluster.settle()
    assert permitted(cluster) == [
        {
            "pciVendorSelector": "10DE:2330",
            "resourceName": f"gpu.cozystack.io/10de-2330-s{s}",
            "externalResourceProvider": True,
        }
        for s in range(3)
    ]


async def test_rendering_keeps_the_rest_of_the_kubevirt_configuration(cluster: Cluster) -> None:
    install_kubevirt(cluster)
    cluster.node("node-a", 1)
    await cluster.settle()
    config = kubevirt(cluster).raw["spec"]["configuration"]
    assert config["developerConfiguration"] == {"featureGates": ["GPU"]}


async def test_node_pinned_classes_permit_the_class_resource(cluster: Cluster) -> None:
    install_kubevirt(cluster)
    cluster.gpu_class(pinning="Node")
    cluster.node("node-a", 2)
    await cluster.settle()
    assert permitted(cluster) == [
        {
            "pciVendorSelector": "10DE:2330",
            "resourceName": H100_RESOURCE,
            "externalResourceProvider": True,
        }
    ]


async def test_settings_are_written_only_when_they_change(cluster: Cluster) -> None:
    install_kubevirt(cluster)
    cluster.node("node-a", 2)
    await cluster.settle()
    written = kubevirt(cluster).metadata.resource_version
    await cluster.settle_after(minutes=1)
    cluster.vm("vm", 2)
    await cluster.settle()
    assert kubevirt(cluster).metadata.resource_version == written
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID)
    cluster.node("node-c", 1, class_name=A100)
    await cluster.settle()
    assert kubevirt(cluster).metadata.resource_version != written
    assert "gpu.cozystack.io/10de-20b5-s0" in [d["resourceName"] for d in permitted(cluster)]


async def test_without_kubevirt_installed_settings_write_nothing(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    await cluster.settle()
    assert cluster.client.peek(KubeVirt, "kubevirt", "kubevirt") is None
