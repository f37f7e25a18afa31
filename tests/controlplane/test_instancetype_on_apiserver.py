"""Instancetype orders on a real API server: the binder, under its own ServiceAccount,
watches the ControllerRevisions KubeVirt records for VMs (apps/v1, label-selected) and
binds the GPUs of a VM's recorded instancetype."""

from __future__ import annotations

import pytest
from realcluster import Fleet, eventually, namespace

from conftest import StartBinder
from gpu_binder.api.instancetype import (
    OBJECT_KIND_LABEL,
    ControllerRevision,
    instancetype_revision_object,
)
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import GPUDevice
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient
from gpu_binder.sim import builders

pytestmark = pytest.mark.controlplane


async def test_a_vm_is_bound_the_gpus_of_its_recorded_instancetype(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    vm = builders.vm_object("vm", ns, [], run_strategy="Always")
    raw = vm.to_dict()
    raw["spec"]["instancetype"] = {"name": "gpu-large", "kind": "VirtualMachineInstancetype"}
    created = await admin.create(VirtualMachine.from_dict(raw))
    rev = instancetype_revision_object(
        "vm-gpu-large-v1beta1-1",
        ns,
        instancetype="gpu-large",
        gpus=fleet.gpus(3),
        owner=builders.owner_reference(created),
    )
    await admin.create(ControllerRevision.from_dict(rev))
    ref = {
        "name": "gpu-large",
        "kind": "VirtualMachineInstancetype",
        "controllerRevisionRef": {"name": "vm-gpu-large-v1beta1-1"},
    }
    await admin.patch_status(VirtualMachine, "vm", ns, {"status": {"instancetypeRef": ref}})

    async def bound() -> list[GPUDevice] | None:
        devs = await fleet.set_of(ns, "vm")
        return devs if len(devs) == 3 else None

    devs = await eventually(bound, what="3 GPUs of the instancetype bound")
    assert {d.spec.node_name for d in devs} == {node}


async def test_the_binder_caches_only_the_revisions_of_instancetypes(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    ns = namespace(control_plane)
    binder = await start_binder()
    other = instancetype_revision_object("statefulset-history", ns, instancetype="x")
    del other["metadata"]["labels"][OBJECT_KIND_LABEL]
    await admin.create(ControllerRevision.from_dict(other))
    mine = instancetype_revision_object("vm-it-v1beta1-1", ns, instancetype="it")
    await admin.create(ControllerRevision.from_dict(mine))

    async def cached() -> bool | None:
        return True if f"{ns}/vm-it-v1beta1-1" in binder.world.revisions else None

    await eventually(cached, what="the instancetype revision cached")
    assert f"{ns}/statefulset-history" not in binder.world.revisions
