"""MemoryClient deletes as the API server does: finalizers and garbage collection."""

from __future__ import annotations

import pytest

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUBindRequest, GPUDevice
from gpu_binder.client.errors import Invalid, NotFound
from gpu_binder.sim.memory import MemoryClient

from .builders import (
    T0,
    device,
    owned_by,
    vm,
    vmi,
    with_meta,
)

# --- deletion, finalizers, garbage collection -------------------------------------------


async def test_delete_without_finalizers_removes_the_object(client: MemoryClient) -> None:
    await client.create(device())
    await client.delete(GPUDevice, "n1-0000-3b-00-0")
    assert client.peek(GPUDevice, "n1-0000-3b-00-0") is None


async def test_delete_of_a_missing_object_is_not_found(client: MemoryClient) -> None:
    with pytest.raises(NotFound):
        await client.delete(GPUDevice, "nope")


async def test_delete_with_finalizers_only_marks_the_object_deleted(
    client: MemoryClient,
) -> None:
    await client.create(device(finalizers=["f"]))
    seen: list[str] = []
    client.subscribe(lambda kind, event: seen.append(event.type))
    await client.delete(GPUDevice, "n1-0000-3b-00-0")
    d = client.peek(GPUDevice, "n1-0000-3b-00-0")
    assert d is not None and d.metadata.deletion_timestamp == T0
    assert seen == ["MODIFIED"]


async def test_removing_the_last_finalizer_of_a_deleted_object_removes_it(
    client: MemoryClient,
) -> None:
    await client.create(device(finalizers=["f"]))
    await client.delete(GPUDevice, "n1-0000-3b-00-0")
    seen: list[str] = []
    client.subscribe(lambda kind, event: seen.append(event.type))
    d = await client.get(GPUDevice, "n1-0000-3b-00-0")
    await client.update(with_meta(d, finalizers=()))
    assert client.peek(GPUDevice, "n1-0000-3b-00-0") is None
    assert seen == ["DELETED"]


async def test_adding_a_finalizer_to_a_deleted_object_is_invalid(client: MemoryClient) -> None:
    await client.create(device(finalizers=["f"]))
    await client.delete(GPUDevice, "n1-0000-3b-00-0")
    d = await client.get(GPUDevice, "n1-0000-3b-00-0")
    with pytest.raises(Invalid):
        await client.update(with_meta(d, finalizers=("f", "g")))


async def test_deleting_an_owner_deletes_its_dependents(client: MemoryClient) -> None:
    owner = await client.create(vm())
    await client.create(vmi(**owned_by(owner)))
    await client.delete(VirtualMachine, "vm1", "t")
    assert client.peek(VirtualMachineInstance, "vm1", "t") is None


async def test_garbage_collection_cascades_through_dependents_of_dependents(
    client: MemoryClient,
) -> None:
    owner = await client.create(vm())
    middle = await client.create(vmi(**owned_by(owner)))
    await client.create(vm("leaf", **owned_by(middle)))
    await client.delete(VirtualMachine, "vm1", "t")
    assert client.peek(VirtualMachine, "leaf", "t") is None


async def test_garbage_collection_honours_the_dependents_finalizers(
    client: MemoryClient,
) -> None:
    owner = await client.create(vm())
    await client.create(vmi(finalizers=["f"], **owned_by(owner)))
    await client.delete(VirtualMachine, "vm1", "t")
    dependent = client.peek(VirtualMachineInstance, "vm1", "t")
    assert dependent is not None and dependent.metadata.deletion_timestamp is not None


async def test_a_dependent_with_another_live_owner_survives(client: MemoryClient) -> None:
    a = await client.create(vm("a"))
    b = await client.create(vm("b"))
    refs = owned_by(a)["ownerReferences"] + owned_by(b)["ownerReferences"]
    await client.create(vmi(ownerReferences=refs))
    await client.delete(VirtualMachine, "a", "t")
    assert client.peek(VirtualMachineInstance, "vm1", "t") is not None


async def test_dependents_wait_for_an_owner_held_by_finalizers(client: MemoryClient) -> None:
    owner = await client.create(vm(finalizers=["f"]))
    await client.create(vmi(**owned_by(owner)))
    await client.delete(VirtualMachine, "vm1", "t")
    assert client.peek(VirtualMachineInstance, "vm1", "t") is not None


async def test_dependents_go_once_the_owners_finalizers_are_removed(
    client: MemoryClient,
) -> None:
    owner = await client.create(vm(finalizers=["f"]))
    await client.create(vmi(**owned_by(owner)))
    await client.delete(VirtualMachine, "vm1", "t")
    await client.patch(VirtualMachine, "vm1", "t", {"metadata": {"finalizers": None}})
    assert client.peek(VirtualMachineInstance, "vm1", "t") is None


async def test_a_namespaced_bind_request_is_collected_with_its_vm(client: MemoryClient) -> None:
    owner = await client.create(vm())
    request = GPUBindRequest.model_validate(
        {
            "metadata": {"name": "vm1", "namespace": "t", **owned_by(owner)},
            "spec": {
                "vm": {"name": "vm1"},
                "vmi": {"name": "vm1"},
                "requests": [{"className": "h100", "count": 1}],
            },
        }
    )
    await client.create(request)
    await client.delete(VirtualMachine, "vm1", "t")
    assert client.peek(GPUBindRequest, "vm1", "t") is None
