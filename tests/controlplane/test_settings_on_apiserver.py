"""The binder's KubeVirt settings on a real API server: the operator's entries survive.

`permittedHostDevices.pciHostDevices` is atomic (KubeVirt's schema, and a list under
x-kubernetes-preserve-unknown-fields alike), so the binder's forced server-side apply
replaces it whole; what it writes must carry every entry the binder does not own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from realcluster import Fleet, eventually, namespace

from conftest import StartBinder
from gpu_binder.api.kinds import KubeVirt
from gpu_binder.binder.config import Config
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient

pytestmark = pytest.mark.controlplane

NIC = {"pciVendorSelector": "15B3:101B", "resourceName": "mellanox.com/ConnectX6"}
VGPU = {"mdevNameSelector": "GRID T4-1Q", "resourceName": "nvidia.com/GRID_T4-1Q"}


async def operator_kubevirt(admin: KubeClient, ns: str) -> None:
    """The operator's KubeVirt CR, applied under a field manager of its own."""
    body = {
        "metadata": {"name": "kubevirt", "namespace": ns},
        "spec": {
            "configuration": {
                "permittedHostDevices": {"pciHostDevices": [NIC], "mediatedDevices": [VGPU]}
            }
        },
    }
    await admin.apply(KubeVirt, body, field_manager="operator")


def permitted(kv: KubeVirt) -> dict[str, Any]:
    devices: dict[str, Any] = kv.raw["spec"]["configuration"]["permittedHostDevices"]
    return devices


async def test_an_operators_entries_survive_the_binders_settings_on_the_api_server(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    ns = namespace(control_plane)
    await operator_kubevirt(admin, ns)
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    await fleet.create_node("a")
    await start_binder(Config(kubevirt_namespace=ns, resync=timedelta(milliseconds=500)))

    async def rendered() -> KubeVirt | None:
        kv = await admin.get(KubeVirt, "kubevirt", ns)
        names = [d["resourceName"] for d in permitted(kv)["pciHostDevices"]]
        return kv if {fleet.slot(0), fleet.slot(1)} <= set(names) else None

    kv = await eventually(rendered, what="slot resources permitted")
    devices = permitted(kv)
    assert devices["pciHostDevices"][0] == NIC
    assert devices["mediatedDevices"] == [VGPU]


async def test_a_settled_binder_leaves_the_kubevirt_cr_alone_on_the_api_server(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    ns = namespace(control_plane)
    await operator_kubevirt(admin, ns)
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_class()
    await fleet.create_node("a")
    manager = await start_binder(Config(kubevirt_namespace=ns, resync=timedelta(milliseconds=200)))

    async def rendered() -> KubeVirt | None:
        kv = await admin.get(KubeVirt, "kubevirt", ns)
        names = [d["resourceName"] for d in permitted(kv)["pciHostDevices"]]
        return kv if fleet.slot(0) in names else None

    written = (await eventually(rendered, what="slot resource permitted")).metadata
    passes = manager.controller.passes

    async def five_more_passes() -> bool:
        return manager.controller.passes >= passes + 5

    await eventually(five_more_passes, what="five more passes")
    kv = await admin.get(KubeVirt, "kubevirt", ns)
    assert kv.metadata.resource_version == written.resource_version
    assert permitted(kv)["pciHostDevices"][0] == NIC
