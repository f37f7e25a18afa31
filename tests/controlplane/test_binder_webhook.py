"""The binder and its webhook on a real API server: orders bound, VMIs pinned over TLS."""

from __future__ import annotations

import pytest
from realcluster import Fleet, eventually, namespace, vmi_of

from conftest import StartBinder
from gpu_binder.api.kinds import Event
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import DEVICES_ANNOTATION
from gpu_binder.client.errors import ApiError
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient

pytestmark = pytest.mark.controlplane

USER_TERM = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}


async def test_a_vm_gets_a_set_and_its_vmi_is_pinned_by_the_webhook_over_tls(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    node_a = await fleet.create_node("a")
    await fleet.create_node("b")
    ns = namespace(control_plane)
    await start_binder()
    vm = await fleet.create_vm(ns, "vm", gpus=2)

    bound = await eventually(lambda: _set(fleet, ns, "vm", 2), what="a set of 2")
    node = bound[0].spec.node_name
    assert {d.spec.node_name for d in bound} == {node} and node.startswith(f"n-{fleet.id}")

    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    USER_TERM,
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node, node_a]}
                        ]
                    },
                ]
            }
        }
    }
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(2), affinity))

    terms = vmi.raw["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    # The user's terms stay, each ANDed with the set's node.
    assert len(terms) == 2
    assert terms[0] == {**USER_TERM, "matchFields": [pin]}
    assert terms[1]["matchFields"][-1] == pin and len(terms[1]["matchFields"]) == 2
    names = sorted(d.metadata.name for d in bound)
    assert sorted(vmi.metadata.annotations[DEVICES_ANNOTATION].split(",")) == names
    slots = sorted(g["deviceName"] for g in vmi.raw["spec"]["domain"]["devices"]["gpus"])
    assert slots == sorted(fleet.slot(d.spec.slot or 0) for d in bound)
    said = await eventually(lambda: _events(admin, ns, "vm"), what="Events on the VM")
    assert {e.reason for e in said} == {"GPUOrder"}


async def test_a_vmi_whose_order_cannot_be_met_is_denied_with_the_binders_message(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()

    with pytest.raises(ApiError) as denied:
        await admin.create(vmi_of(None, ns, "big", fleet.gpus(4)))

    message = denied.value.message
    assert "denied the request" in message
    assert f"4 × {fleet.class_name} requested; the largest free set is 2 on {node}" in message
    assert await _vmis(admin, ns) == []


async def _set(fleet: Fleet, ns: str, vm: str, n: int) -> list:  # type: ignore[type-arg]
    devices = await fleet.set_of(ns, vm)
    return devices if len(devices) == n else []


async def _events(admin: KubeClient, ns: str, name: str) -> list[Event]:
    return [e for e in (await admin.list(Event, ns)).items if e.regarding.get("name") == name]


async def _vmis(admin: KubeClient, ns: str) -> list[VirtualMachineInstance]:
    return (await admin.list(VirtualMachineInstance, ns)).items
