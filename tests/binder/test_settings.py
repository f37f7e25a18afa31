"""Settings: the KubeVirt CR's permitted host devices, rendered only when they change."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.types import GPUClass

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


# --- entries the binder does not own -----------------------------------------------------
# pciHostDevices is atomic in KubeVirt's schema: the binder writes the whole list, so it
# must carry every entry it does not own (DESIGN §3 step 10, settings).

NIC = {"pciVendorSelector": "15B3:101B", "resourceName": "mellanox.com/ConnectX6"}
VGPU = {"mdevNameSelector": "GRID T4-1Q", "resourceName": "nvidia.com/GRID_T4-1Q"}


def install_kubevirt_with(cluster: Cluster, permitted_host_devices: dict[str, Any]) -> None:
    cluster.client.put(
        KubeVirt.from_dict(
            {
                "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                "spec": {"configuration": {"permittedHostDevices": permitted_host_devices}},
            }
        )
    )


def slot_entry(slot: int, device_id: str = "2330") -> dict[str, Any]:
    return {
        "pciVendorSelector": f"10DE:{device_id.upper()}",
        "resourceName": f"gpu.cozystack.io/10de-{device_id}-s{slot}",
        "externalResourceProvider": True,
    }


def names(cluster: Cluster) -> list[str]:
    return [d["resourceName"] for d in permitted(cluster)]


async def test_an_operators_entry_for_another_resource_survives_the_settings_pass(
    cluster: Cluster,
) -> None:
    install_kubevirt_with(cluster, {"pciHostDevices": [NIC]})
    cluster.node("node-a", 2)
    await cluster.settle()
    assert permitted(cluster) == [NIC, slot_entry(0), slot_entry(1)]


async def test_an_operators_mediated_devices_survive_the_settings_pass(cluster: Cluster) -> None:
    install_kubevirt_with(cluster, {"mediatedDevices": [VGPU]})
    cluster.node("node-a", 1)
    await cluster.settle()
    config = kubevirt(cluster).raw["spec"]["configuration"]
    assert config["permittedHostDevices"]["mediatedDevices"] == [VGPU]
    assert names(cluster) == ["gpu.cozystack.io/10de-2330-s0"]


async def test_an_operators_entry_for_a_device_class_resource_name_survives(
    cluster: Cluster,
) -> None:
    # A Device class's own resourceName is never rendered (its VMIs get slot resources).
    theirs = {"pciVendorSelector": "10DE:2330", "resourceName": H100_RESOURCE}
    install_kubevirt_with(cluster, {"pciHostDevices": [theirs]})
    cluster.node("node-a", 1)
    await cluster.settle()
    assert permitted(cluster) == [theirs, slot_entry(0)]


async def test_an_operators_entry_named_like_a_node_class_gives_way_to_the_binders(
    cluster: Cluster,
) -> None:
    # Ownership cannot be told apart by name: the binder's entry wins, the operator's goes.
    theirs = {"pciVendorSelector": "10DE:9999", "resourceName": H100_RESOURCE}
    install_kubevirt_with(cluster, {"pciHostDevices": [NIC, theirs]})
    cluster.gpu_class(pinning="Node")
    cluster.node("node-a", 1)
    await cluster.settle()
    assert permitted(cluster) == [
        NIC,
        {
            "pciVendorSelector": "10DE:2330",
            "resourceName": H100_RESOURCE,
            "externalResourceProvider": True,
        },
    ]


async def test_a_slot_entry_of_a_deleted_class_is_removed(cluster: Cluster) -> None:
    install_kubevirt_with(cluster, {"pciHostDevices": [NIC]})
    cluster.node("node-a", 1)
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID)
    cluster.node("node-c", 1, class_name=A100)
    await cluster.settle()
    assert "gpu.cozystack.io/10de-20b5-s0" in names(cluster)
    await cluster.client.delete(GPUClass, A100)
    await cluster.settle()
    assert permitted(cluster) == [NIC, slot_entry(0)]


async def test_a_deleted_node_class_entry_is_removed(cluster: Cluster) -> None:
    install_kubevirt_with(cluster, {"pciHostDevices": [NIC]})
    cluster.node("node-a", 1)
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID, pinning="Node")
    cluster.node("node-c", 1, class_name=A100)
    await cluster.settle()
    assert A100_RESOURCE in names(cluster)
    await cluster.client.delete(GPUClass, A100)
    await cluster.settle()
    assert permitted(cluster) == [NIC, slot_entry(0)]


async def test_a_pass_over_unchanged_settings_with_operator_entries_writes_nothing(
    cluster: Cluster,
) -> None:
    install_kubevirt_with(cluster, {"pciHostDevices": [NIC], "mediatedDevices": [VGPU]})
    cluster.node("node-a", 2)
    await cluster.settle()
    written = kubevirt(cluster).metadata.resource_version
    writes = cluster.client.writes
    result = await cluster.settle_after(minutes=1)
    assert (result, cluster.client.writes) == (0, writes)
    assert kubevirt(cluster).metadata.resource_version == written
