"""MemoryClient keeps the API server's semantics of reads and writes: one test per rule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUDevice, Phase
from gpu_binder.client.errors import AlreadyExists, Conflict, Invalid, NotFound
from gpu_binder.sim.memory import MemoryClient

from .builders import (
    T0,
    device,
    record,
    vm,
    vmi,
    with_meta,
    with_phase,
    with_slot,
)

# --- create, get, list ------------------------------------------------------------------


async def test_create_sets_uid_creation_time_generation_and_resource_version(
    client: MemoryClient,
) -> None:
    d = await client.create(device())
    assert d.metadata.uid
    assert d.metadata.creation_timestamp == T0
    assert d.metadata.generation == 1
    assert d.metadata.resource_version == client.resource_version


async def test_every_write_takes_the_next_global_resource_version(client: MemoryClient) -> None:
    a = await client.create(device("a"))
    b = await client.create(vm())
    a2 = await client.update(with_slot(a, 1))
    versions = [int(o.metadata.resource_version) for o in (a, b, a2)]
    assert versions == [versions[0], versions[0] + 1, versions[0] + 2]


async def test_timestamps_follow_the_injected_clock() -> None:
    now = [T0]
    client = MemoryClient(clock=lambda: now[0])
    now[0] = T0 + timedelta(hours=1, microseconds=5)
    d = await client.create(device())
    assert d.metadata.creation_timestamp == T0 + timedelta(hours=1)


async def test_create_of_an_existing_name_is_already_exists(client: MemoryClient) -> None:
    await client.create(device())
    with pytest.raises(AlreadyExists):
        await client.create(device())


async def test_create_with_a_resource_version_is_invalid(client: MemoryClient) -> None:
    with pytest.raises(Invalid):
        await client.create(device(resourceVersion="7"))


async def test_create_of_a_namespaced_kind_without_namespace_is_invalid(
    client: MemoryClient,
) -> None:
    with pytest.raises(Invalid):
        await client.create(vm(namespace=""))


async def test_create_drops_the_status_of_a_kind_with_status_subresource(
    client: MemoryClient,
) -> None:
    d = await client.create(with_phase(device(), Phase.BOUND))
    assert d.status.phase is None


async def test_dry_run_create_stores_nothing(client: MemoryClient) -> None:
    before = client.resource_version
    await client.create(device(), dry_run=True)
    assert client.peek(GPUDevice, "n1-0000-3b-00-0") is None
    assert client.resource_version == before


async def test_get_of_a_missing_object_is_not_found(client: MemoryClient) -> None:
    with pytest.raises(NotFound):
        await client.get(GPUDevice, "nope")


async def test_get_returns_the_stored_object(client: MemoryClient) -> None:
    created = await client.create(device())
    assert await client.get(GPUDevice, created.metadata.name) is created


async def test_list_of_one_namespace_leaves_out_the_others(client: MemoryClient) -> None:
    await client.create(vm("a", "t1"))
    await client.create(vm("b", "t2"))
    listed = await client.list(VirtualMachine, namespace="t1")
    assert [v.metadata.name for v in listed.items] == ["a"]


async def test_list_carries_the_current_resource_version(client: MemoryClient) -> None:
    await client.create(device())
    assert (await client.list(GPUDevice)).resource_version == client.resource_version


# --- label selectors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gold", ["a"]),
        ("tier==gold", ["a"]),
        ("tier!=gold", ["b", "c"]),
        ("tier in (gold, silver)", ["a", "b"]),
        ("tier notin (gold)", ["b", "c"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("tier,zone=x", ["a"]),
        ("tier in (gold,silver),zone notin (x)", ["b"]),
    ],
)
async def test_label_selector_selects_by_its_requirements(
    client: MemoryClient, selector: str, expected: list[str]
) -> None:
    await client.create(device("a", labels={"tier": "gold", "zone": "x"}))
    await client.create(device("b", labels={"tier": "silver"}))
    await client.create(device("c"))
    listed = await client.list(GPUDevice, label_selector=selector)
    assert [d.metadata.name for d in listed.items] == expected


async def test_a_list_of_objects_lacking_a_label_follows_the_writes_after_it(
    client: MemoryClient,
) -> None:
    # The first "!tier" list starts the kind's index of unlabelled objects; later writes
    # must keep it: labelled, unlabelled, created and deleted objects.
    a = await client.create(device("a"))
    b = await client.create(device("b", labels={"tier": "gold"}))
    await client.create(device("c"))
    assert [
        d.metadata.name for d in (await client.list(GPUDevice, label_selector="!tier")).items
    ] == [
        "a",
        "c",
    ]
    await client.update(with_meta(a, labels={"tier": "gold"}))
    await client.update(with_meta(b, labels={}))
    await client.delete(GPUDevice, "c")
    await client.create(device("d"))
    listed = await client.list(GPUDevice, label_selector="!tier,zone!=x")
    assert [d.metadata.name for d in listed.items] == ["b", "d"]


async def test_malformed_label_selector_is_invalid(client: MemoryClient) -> None:
    await client.create(device())
    with pytest.raises(Invalid):
        await client.list(GPUDevice, label_selector="tier in gold")


# --- update and update_status -----------------------------------------------------------


async def test_update_with_a_stale_resource_version_is_a_conflict(client: MemoryClient) -> None:
    d = await client.create(device())
    await client.update(with_slot(d, 1))
    with pytest.raises(Conflict):
        await client.update(with_slot(d, 2))


async def test_update_without_a_resource_version_is_a_conflict(client: MemoryClient) -> None:
    d = await client.create(device())
    with pytest.raises(Conflict):
        await client.update(with_meta(with_slot(d, 1), resource_version=""))


async def test_update_of_a_missing_object_is_not_found(client: MemoryClient) -> None:
    with pytest.raises(NotFound):
        await client.update(device(resourceVersion="1"))


async def test_update_keeps_the_stored_status(client: MemoryClient) -> None:
    d = await client.create(device())
    d = await client.update_status(with_phase(d, Phase.BOUND))
    d = await client.update(with_phase(with_slot(d, 3), Phase.AVAILABLE))
    assert (d.spec.slot, d.status.phase) == (3, Phase.BOUND)


async def test_update_bumps_generation_when_spec_changes(client: MemoryClient) -> None:
    d = await client.create(device())
    assert (await client.update(with_slot(d, 1))).metadata.generation == 2


async def test_update_of_metadata_alone_keeps_generation(client: MemoryClient) -> None:
    d = await client.create(device())
    d = await client.update(with_meta(d, labels={"a": "b"}))
    assert (d.metadata.labels, d.metadata.generation) == ({"a": "b"}, 1)


async def test_update_keeps_server_owned_metadata(client: MemoryClient) -> None:
    d = await client.create(device())
    forged = with_meta(with_slot(d, 1), uid="forged", creation_timestamp=T0 - timedelta(days=1))
    u = await client.update(forged)
    assert (u.metadata.uid, u.metadata.creation_timestamp) == (d.metadata.uid, T0)


async def test_update_of_a_kind_without_status_subresource_writes_the_whole_object(
    client: MemoryClient,
) -> None:
    r = await client.create(record())
    closed = r.model_copy(update={"spec": r.spec.model_copy(update={"end": T0})})
    assert (await client.update(closed)).spec.end == T0


async def test_update_status_writes_only_status(client: MemoryClient) -> None:
    d = await client.create(device())
    u = await client.update_status(
        with_meta(with_phase(with_slot(d, 5), Phase.BOUND), labels={"x": "y"})
    )
    assert (u.status.phase, u.spec.slot, u.metadata.labels) == (Phase.BOUND, None, {})


async def test_update_status_keeps_generation(client: MemoryClient) -> None:
    d = await client.create(device())
    assert (await client.update_status(with_phase(d, Phase.BOUND))).metadata.generation == 1


async def test_update_status_with_a_stale_resource_version_is_a_conflict(
    client: MemoryClient,
) -> None:
    d = await client.create(device())
    await client.update_status(with_phase(d, Phase.BOUND))
    with pytest.raises(Conflict):
        await client.update_status(with_phase(d, Phase.AVAILABLE))


async def test_update_status_of_a_kind_without_status_subresource_is_not_found(
    client: MemoryClient,
) -> None:
    r = await client.create(record())
    with pytest.raises(NotFound):
        await client.update_status(r)


async def test_a_write_that_changes_nothing_keeps_the_version_and_sends_no_event(
    client: MemoryClient,
) -> None:
    d = await client.create(device())
    seen: list[str] = []
    client.subscribe(lambda kind, event: seen.append(event.type))
    again = await client.update_status(d)
    assert (again.metadata.resource_version, seen) == (d.metadata.resource_version, [])


async def test_status_of_a_dataclass_kind_survives_an_update(client: MemoryClient) -> None:
    v = await client.create(vmi())
    running = VirtualMachineInstance.from_dict({**v.to_dict(), "status": {"phase": "Running"}})
    v = await client.update_status(running)
    labelled = VirtualMachineInstance.from_dict(
        {**v.to_dict(), "metadata": {**v.metadata.to_dict(), "labels": {"a": "b"}}, "status": {}}
    )
    v = await client.update(labelled)
    assert (v.phase, v.metadata.labels) == ("Running", {"a": "b"})


async def test_changing_the_written_dict_afterwards_leaves_the_store_alone(
    client: MemoryClient,
) -> None:
    raw: dict[str, Any] = {"metadata": {"name": "vm1", "namespace": "t"}, "spec": {"running": True}}
    await client.create(VirtualMachine.from_dict(raw))
    raw["spec"]["running"] = False
    stored = client.peek(VirtualMachine, "vm1", "t")
    assert stored is not None and stored.running


# --- patch and apply --------------------------------------------------------------------


async def test_patch_merges_objects_and_deletes_keys_set_to_null(client: MemoryClient) -> None:
    await client.create(device(labels={"a": "1", "b": "2"}))
    d = await client.patch(
        GPUDevice, "n1-0000-3b-00-0", "", {"metadata": {"labels": {"a": None, "c": "3"}}}
    )
    assert d.metadata.labels == {"b": "2", "c": "3"}


async def test_patch_with_a_stale_resource_version_is_a_conflict(client: MemoryClient) -> None:
    d = await client.create(device())
    await client.update(with_slot(d, 1))
    patch = {"metadata": {"resourceVersion": d.metadata.resource_version}, "spec": {"slot": 2}}
    with pytest.raises(Conflict):
        await client.patch(GPUDevice, d.metadata.name, "", patch)


async def test_patch_leaves_the_status_subresource_alone(client: MemoryClient) -> None:
    d = await client.create(device())
    p = await client.patch(GPUDevice, d.metadata.name, "", {"status": {"phase": "Bound"}})
    assert p.status.phase is None


async def test_patch_to_an_invalid_object_is_invalid(client: MemoryClient) -> None:
    d = await client.create(device())
    with pytest.raises(Invalid):
        await client.patch(GPUDevice, d.metadata.name, "", {"spec": {"pciAddress": "bad"}})


async def test_apply_creates_a_missing_object(client: MemoryClient) -> None:
    applied = await client.apply(VirtualMachine, vm().to_dict())
    assert applied.metadata.uid and client.peek(VirtualMachine, "vm1", "t") is applied


async def test_apply_merges_the_given_fields_into_an_existing_object(
    client: MemoryClient,
) -> None:
    await client.create(vm(labels={"keep": "1"}))
    applied = await client.apply(
        VirtualMachine,
        {"metadata": {"name": "vm1", "namespace": "t"}, "spec": {"running": False}},
    )
    assert (applied.running, applied.metadata.labels) == (False, {"keep": "1"})
