"""The ControllerRevision view: the GPUs of the instancetype KubeVirt recorded for a VM."""

from __future__ import annotations

from gpu_binder.api.instancetype import (
    INSTANCETYPE_REVISIONS,
    ControllerRevision,
    instancetype_revision_object,
)
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
