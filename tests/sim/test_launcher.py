"""The pods KubeVirt renders for a VMI, as template.go renderLaunchManifest renders them."""

from __future__ import annotations

import random
from typing import Any

from gpu_binder.api.pod import Pod
from gpu_binder.sim.launcher import (
    VIRTUALIZATION_DEVICES,
    is_temp_pod,
    name_pod,
    render_launcher_pod,
)

from .kubevirt_world import SLOT0, SLOT1, pin


def _vmi(**spec: Any) -> dict[str, Any]:
    devices = {
        "gpus": [{"name": "g0", "deviceName": SLOT0}, {"name": "g1", "deviceName": SLOT1}],
        "hostDevices": [{"name": "nic", "deviceName": "mellanox.com/cx7"}],
    }
    return {
        "metadata": {
            "name": "vm1",
            "namespace": "t",
            "uid": "vmi-uid",
            "labels": {"app": "train"},
            "annotations": {"gpu.cozystack.io/devices": "d0,d1"},
        },
        "spec": {"domain": {"devices": devices}, **spec},
    }


def devices_of(raw: dict[str, Any]) -> dict[str, int]:
    """The pod's units other than virt-handler's (kvm, tun, vhost-net: one each always)."""
    resources = Pod.from_dict(raw).resources
    assert all(resources[r] == 1 for r in VIRTUALIZATION_DEVICES)
    return {r: n for r, n in resources.items() if r not in VIRTUALIZATION_DEVICES}


def test_every_gpu_and_host_device_entry_is_a_unit_of_its_device_name() -> None:
    assert devices_of(render_launcher_pod(_vmi())) == {SLOT0: 1, SLOT1: 1, "mellanox.com/cx7": 1}


def test_two_entries_of_one_device_name_ask_for_two_units() -> None:
    vmi = _vmi()
    vmi["spec"]["domain"]["devices"] = {
        "gpus": [{"name": f"g{i}", "deviceName": "nvidia.com/H100"} for i in range(2)]
    }
    assert devices_of(render_launcher_pod(vmi)) == {"nvidia.com/H100": 2}


def test_a_dra_entry_asks_for_no_unit() -> None:
    vmi = _vmi()
    vmi["spec"]["domain"]["devices"] = {
        "gpus": [{"name": "g", "deviceName": "nvidia.com/H100", "claimRequest": {"claimName": "c"}}]
    }
    assert devices_of(render_launcher_pod(vmi)) == {}


def test_the_vmis_own_resource_entry_replaces_the_count_of_its_device_name() -> None:
    vmi = _vmi()
    vmi["spec"]["domain"]["resources"] = {"limits": {SLOT0: "3"}, "requests": {SLOT0: "3"}}
    assert devices_of(render_launcher_pod(vmi))[SLOT0] == 3


OBSOLETE = {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}


def terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    return list(affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])


def test_the_pod_copies_the_vmi_affinity_as_it_is_at_render_time() -> None:
    vmi = pin(_vmi(), "node-a")
    raw = render_launcher_pod(vmi)
    vmi["spec"]["affinity"]["nodeAffinity"] = {}
    [term] = terms(raw)
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]


def test_a_host_model_cpu_keeps_every_term_off_obsolete_host_model_nodes() -> None:
    [term] = terms(render_launcher_pod(pin(_vmi(), "node-a")))
    assert term["matchExpressions"] == [OBSOLETE]


def test_a_vmi_without_affinity_renders_a_pod_that_only_avoids_obsolete_nodes() -> None:
    assert terms(render_launcher_pod(_vmi())) == [{"matchExpressions": [OBSOLETE]}]


def test_a_vmi_with_a_named_cpu_model_and_no_affinity_renders_none() -> None:
    vmi = _vmi()
    vmi["spec"]["domain"]["cpu"] = {"model": "Skylake-Server"}
    assert "affinity" not in render_launcher_pod(vmi)["spec"]


def test_the_node_selector_is_the_vmis_over_kubevirts_schedulable_label() -> None:
    raw = render_launcher_pod(_vmi(nodeSelector={"zone": "a"}))
    assert raw["spec"]["nodeSelector"] == {"kubevirt.io/schedulable": "true", "zone": "a"}


def test_the_pod_is_labelled_and_owned_as_the_vmis_launcher() -> None:
    pod = Pod.from_dict(render_launcher_pod(_vmi()))
    labels = pod.metadata.labels
    assert (labels["kubevirt.io"], labels["kubevirt.io/created-by"], labels["app"]) == (
        "virt-launcher",
        "vmi-uid",
        "train",
    )
    assert (pod.vmi_name, pod.vmi_uid) == ("vm1", "vmi-uid")
    owner = pod.metadata.owner("VirtualMachineInstance")
    assert owner is not None and owner.controller


def test_the_pod_carries_the_vmi_annotations_and_its_domain() -> None:
    annotations = render_launcher_pod(_vmi())["metadata"]["annotations"]
    assert annotations["gpu.cozystack.io/devices"] == "d0,d1"
    assert annotations["kubevirt.io/domain"] == "vm1"


def test_the_pod_is_named_after_admission_from_its_generate_name_and_five_characters() -> None:
    raw = render_launcher_pod(_vmi())
    assert "name" not in raw["metadata"], "admission sees no name"
    meta = name_pod(raw, random.Random(1))["metadata"]
    assert meta["generateName"] == "virt-launcher-vm1-"
    suffix = meta["name"].removeprefix("virt-launcher-vm1-")
    assert len(suffix) == 5 and set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_the_temporary_pod_is_the_same_manifest_marked_ephemeral() -> None:
    launcher, temp = render_launcher_pod(_vmi()), render_launcher_pod(_vmi(), temp=True)
    assert is_temp_pod(temp) and not is_temp_pod(launcher)
    assert Pod.from_dict(temp).resources == Pod.from_dict(launcher).resources
