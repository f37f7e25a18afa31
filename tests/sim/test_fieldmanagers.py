"""The store stamps managedFields as kube-apiserver does, for the one field the binder
reads them for: each write's manager gets its entry stamped with the server's time, and
the phase belongs to whoever changed it last."""

from __future__ import annotations

from datetime import timedelta

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.fieldmanagers import entries_of, writing_as
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.vmistatus import with_phase

from .builders import vmi


async def test_the_write_of_a_phase_is_stamped_with_the_servers_time_to_the_second(
    clock: VirtualClock, store: MemoryClient
) -> None:
    created = await store.create(vmi())
    clock.advance(30.7)
    async with writing_as("virt-handler"):
        running = await store.update_status(with_phase(created, "Running", clock.now()))
    assert running.phase_written_at == clock.now().replace(microsecond=0)


async def test_the_phase_belongs_to_whoever_changed_it_last(
    clock: VirtualClock, store: MemoryClient
) -> None:
    created = await store.create(vmi())
    async with writing_as("virt-handler"):
        running = await store.update_status(with_phase(created, "Running", clock.now()))
    clock.advance(60)
    async with writing_as("virt-controller"):
        failed = await store.update_status(with_phase(running, "Failed", clock.now()))
    owners = [e["manager"] for e in entries_of(failed) or [] if e["fieldsV1"]]
    assert owners == ["virt-controller"]
    assert failed.phase_written_at == clock.now()


async def test_a_later_change_by_the_phases_writer_moves_its_stamp(
    clock: VirtualClock, store: MemoryClient
) -> None:
    # The server keeps one time per manager: its last change of anything.
    created = await store.create(vmi())
    async with writing_as("virt-controller"):
        failed = await store.update_status(with_phase(created, "Failed", clock.now()))
        clock.advance(45)
        raw = failed.to_dict()
        raw["metadata"]["labels"] = {"seen": "yes"}
        labelled = await store.update(VirtualMachineInstance.from_dict(raw))
    assert labelled.phase_written_at == clock.now()


async def test_another_managers_write_leaves_the_phases_stamp(
    clock: VirtualClock, store: MemoryClient
) -> None:
    created = await store.create(vmi())
    async with writing_as("virt-handler"):
        ended = await store.update_status(with_phase(created, "Succeeded", clock.now()))
    stamped = ended.phase_written_at
    clock.advance(45)
    raw = ended.to_dict()
    raw["metadata"]["finalizers"] = ["kubevirt.io/foo"]
    async with writing_as("gpu-binder"):
        later = await store.update(VirtualMachineInstance.from_dict(raw))
    assert later.phase_written_at == stamped


async def test_a_write_that_changes_nothing_stamps_nothing(
    clock: VirtualClock, store: MemoryClient
) -> None:
    created = await store.create(vmi())
    async with writing_as("virt-handler"):
        running = await store.update_status(with_phase(created, "Running", clock.now()))
        clock.advance(10)
        again = await store.update_status(running)
    assert again.phase_written_at == running.phase_written_at
    assert clock.now() - timedelta(seconds=10) == running.phase_written_at
