"""Instancetype views: the GPUs KubeVirt recorded for a VM in a ControllerRevision, the
GPUs an instancetype gives, and which instancetype a VM names."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.instancetype import (
    CLUSTER_INSTANCETYPE_KIND,
    INSTANCETYPE_API_VERSION,
    INSTANCETYPE_REVISIONS,
    ControllerRevision,
    VirtualMachineClusterInstancetype,
    instancetype_matcher,
    instancetype_revision_object,
)
from gpu_binder.api.kinds import resource_of
from gpu_binder.sim.selectors import selector_matches

H100 = "nvidia.com/GH100_H100_SXM5_80GB"


def test_a_revision_holds_the_device_names_of_the_recorded_gpus_and_host_devices() -> None:
    raw = instancetype_revision_object(
        "vm-big-rev", "tenant", instancetype="big", gpus=[H100, H100], host_devices=["x/y"]
    )
    rev = ControllerRevision.from_dict(raw)
    assert (rev.gpus, rev.host_devices) == ((H100, H100), ("x/y",))
    assert rev.object_name == "big" and rev.is_instancetype


def test_a_cluster_instancetype_revision_is_read_alike() -> None:
    raw = instancetype_revision_object(
        "r", "tenant", instancetype="big", kind="VirtualMachineClusterInstancetype", gpus=[H100]
    )
    assert ControllerRevision.from_dict(raw).gpus == (H100,)


def test_a_revision_of_a_preference_holds_no_devices() -> None:
    raw = instancetype_revision_object("r", "tenant", instancetype="p", gpus=[H100])
    raw["data"]["kind"] = "VirtualMachinePreference"
    raw["metadata"]["labels"]["instancetype.kubevirt.io/object-kind"] = "VirtualMachinePreference"
    rev = ControllerRevision.from_dict(raw)
    assert rev.gpus == () and not rev.is_instancetype


def test_the_watch_selector_takes_instancetype_revisions_only() -> None:
    rev = ControllerRevision.from_dict(instancetype_revision_object("r", "t", instancetype="i"))
    assert selector_matches(INSTANCETYPE_REVISIONS, rev.metadata.labels)
    assert not selector_matches(INSTANCETYPE_REVISIONS, {"controller-revision-hash": "abc"})
    preference = {"instancetype.kubevirt.io/object-kind": "VirtualMachineClusterPreference"}
    assert not selector_matches(INSTANCETYPE_REVISIONS, preference)


def test_a_vm_start_revision_is_no_instancetype_and_keeps_the_vm_spec() -> None:
    rev = ControllerRevision.from_dict(
        {"metadata": {"name": "revision-start-vm-u-1"}, "data": {"spec": {}}, "revision": 1}
    )
    assert (rev.is_instancetype, rev.gpus, rev.data, rev.revision) == (False, (), {"spec": {}}, 1)


def _instancetype(name: str = "gpu-2") -> dict[str, Any]:
    return {
        "apiVersion": INSTANCETYPE_API_VERSION,
        "kind": CLUSTER_INSTANCETYPE_KIND,
        "metadata": {"name": name, "uid": "it-uid", "generation": 1},
        "spec": {
            "cpu": {"guest": 8},
            "memory": {"guest": "64Gi"},
            "gpus": [{"name": "gpu0", "deviceName": H100}, {"name": "gpu1", "deviceName": H100}],
            "hostDevices": [{"name": "nic", "deviceName": "mellanox.com/cx7"}],
        },
    }


def test_an_instancetype_gives_its_gpus_then_its_host_devices() -> None:
    it = VirtualMachineClusterInstancetype.from_dict(_instancetype())
    assert it.device_names == (H100, H100, "mellanox.com/cx7")


def test_a_matcher_without_a_kind_means_a_cluster_instancetype() -> None:
    vm = {"metadata": {"name": "vm", "namespace": "t"}, "spec": {"instancetype": {"name": "x"}}}
    matcher = instancetype_matcher(vm)
    assert matcher is not None and matcher.cluster and matcher.kind == CLUSTER_INSTANCETYPE_KIND


def test_the_client_serves_revisions_and_instancetypes() -> None:
    assert resource_of(ControllerRevision).group == "apps"
    assert not resource_of(VirtualMachineClusterInstancetype).namespaced
