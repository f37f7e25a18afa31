"""Instancetype views: the GPUs an instancetype gives, and the revision a VM reads it from."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.instancetype import (
    CLUSTER_INSTANCETYPE_KIND,
    INSTANCETYPE_API_VERSION,
    REVISION_OBJECT_NAME_LABEL,
    ControllerRevision,
    VirtualMachineClusterInstancetype,
    instancetype_matcher,
    recorded_revision,
    revision_matches,
)
from gpu_binder.api.kinds import resource_of

H100 = "nvidia.com/GH100_H100_SXM5_80GB"


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


def _vm(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vm", "namespace": "t"}, "spec": spec}


def test_an_instancetype_gives_its_gpus_then_its_host_devices() -> None:
    it = VirtualMachineClusterInstancetype.from_dict(_instancetype())
    assert it.device_names == (H100, H100, "mellanox.com/cx7")


def test_a_revision_of_an_instancetype_gives_the_gpus_it_recorded() -> None:
    rev = ControllerRevision.from_dict(
        {
            "metadata": {"name": "vm-gpu-2-v1beta1-it-uid-1", "namespace": "t"},
            "data": _instancetype(),
        }
    )
    assert rev.instancetype_kind == CLUSTER_INSTANCETYPE_KIND
    assert rev.instancetype_device_names == (H100, H100, "mellanox.com/cx7")


def test_a_vm_start_revision_is_no_instancetype() -> None:
    rev = ControllerRevision.from_dict(
        {"metadata": {"name": "revision-start-vm-u-1"}, "data": {"spec": {}}, "revision": 1}
    )
    assert (rev.instancetype_kind, rev.instancetype_device_names, rev.revision) == ("", (), 1)


def test_a_matcher_without_a_kind_means_a_cluster_instancetype() -> None:
    matcher = instancetype_matcher(_vm(instancetype={"name": "gpu-2"}))
    assert matcher is not None and matcher.cluster and matcher.kind == CLUSTER_INSTANCETYPE_KIND


def test_the_revision_name_in_the_matcher_wins_over_the_status() -> None:
    vm = _vm(instancetype={"name": "gpu-2", "revisionName": "pinned"})
    vm["status"] = {"instancetypeRef": {"controllerRevisionRef": {"name": "recorded"}}}
    assert recorded_revision(vm) == "pinned"


def test_the_status_records_the_revision_once_stored() -> None:
    vm = _vm(instancetype={"name": "gpu-2"})
    before = recorded_revision(vm)
    vm["status"] = {"instancetypeRef": {"controllerRevisionRef": {"name": "recorded"}}}
    assert (before, recorded_revision(vm)) == ("", "recorded")


def test_a_revision_recorded_for_another_instancetype_does_not_match() -> None:
    rev = ControllerRevision.from_dict(
        {"metadata": {"name": "r", "labels": {REVISION_OBJECT_NAME_LABEL: "gpu-1"}}, "data": {}}
    )
    assert not revision_matches(_vm(instancetype={"name": "gpu-2"}), rev)
    assert revision_matches(_vm(instancetype={"name": "gpu-1"}), rev)


def test_the_client_serves_revisions_and_instancetypes() -> None:
    assert resource_of(ControllerRevision).group == "apps"
    assert not resource_of(VirtualMachineClusterInstancetype).namespaced
