"""Reserved records: every interval a device is bound to its VM with no VMI on it (a
stopped VM's reservation) is a record of kind Reserved beside the Attached ones, with
their guarantees: one record per interval, closed at the true time, surviving restarts,
immutable once closed."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

from gpu_binder.api.types import GPUDevice, GPUUsageRecord, RecordKind
from gpu_binder.client.interface import WatchEvent

from .cluster import LEDGER, NAMESPACE, Cluster


def spans(records: list[GPUUsageRecord]) -> list[tuple[str, datetime, datetime | None]]:
    """(kind, start, end) of each record, in order of start (then end, open last)."""
    out = [(r.spec.kind.value, r.spec.start, r.spec.end) for r in records]
    return sorted(out, key=lambda s: (s[1], s[2] is None, s[2] or s[1]))


async def stopped(cluster: Cluster, gpus: int = 1, **kwargs: str) -> datetime:
    """A VM bound while stopped; returns when it was bound."""
    cluster.gpu_class(**kwargs) if kwargs else None
    cluster.node("node-a")
    bound = cluster.clock.now
    cluster.vm("vm", gpus)
    await cluster.settle()
    assert len(cluster.set_of("vm")) == gpus
    return bound


async def test_a_vm_bound_while_stopped_is_reserved_from_its_bind(cluster: Cluster) -> None:
    bound = await stopped(cluster, gpus=2)
    records = cluster.reserved()
    assert [(r.spec.start, r.spec.end) for r in records] == [(bound, None), (bound, None)]
    for r in records:
        assert r.metadata.namespace == LEDGER
        assert (r.spec.kind, r.spec.namespace, r.spec.vm) == (RecordKind.RESERVED, NAMESPACE, "vm")
        assert r.spec.vm_uid == cluster.vm_uid("vm") and r.spec.vmi is None
    assert sorted(r.spec.device for r in records) == cluster.set_of("vm")


async def test_a_reservation_ends_when_the_vmi_attaches_at_its_start(cluster: Cluster) -> None:
    await stopped(cluster)
    cluster.set_running("vm", True)
    scheduled = cluster.clock.advance(minutes=30)
    cluster.start("vm", scheduled=scheduled)
    cluster.clock.advance(seconds=20)  # the binder notices a little later
    await cluster.settle()
    [reserved] = cluster.reserved()
    [attached] = cluster.records()
    assert reserved.spec.end == attached.spec.start == scheduled


async def test_a_stopped_vm_is_reserved_from_its_vmis_finish(cluster: Cluster) -> None:
    await stopped(cluster)
    cluster.set_running("vm", True)
    cluster.start("vm")
    await cluster.settle()
    finished = cluster.clock.advance(hours=2)
    await cluster.stop("vm")
    await cluster.settle_after(seconds=30)
    [attached] = cluster.records()
    reservation = [r for r in cluster.reserved() if r.spec.end is None]
    assert attached.spec.end == finished
    assert [r.spec.start for r in reservation] == [finished]


async def test_a_reservation_ends_when_its_gpus_are_released() -> None:
    cluster = Cluster()
    await stopped(cluster, release_after="10m")
    cluster.clock.advance(minutes=10)
    await cluster.settle()
    [record] = cluster.reserved()
    assert cluster.set_of("vm") == []
    assert record.spec.end == cluster.clock.now


async def test_held_without_a_break_a_gpu_is_billed_without_a_gap_or_an_overlap(
    cluster: Cluster,
) -> None:
    bound = await stopped(cluster)
    for _ in range(2):
        cluster.set_running("vm", True)
        await cluster.settle_after(minutes=5)
        cluster.start("vm")
        await cluster.settle()
        cluster.clock.advance(hours=1)
        await cluster.stop("vm")
        await cluster.settle_after(minutes=20)
    kinds = spans(cluster.ledger())
    assert [k for k, _, _ in kinds] == ["Reserved", "Attached"] * 2 + ["Reserved"]
    assert kinds[0][1] == bound and kinds[-1][2] is None
    for (_, _, end), (_, start, _) in itertools.pairwise(kinds):
        assert end == start


async def test_a_reservation_is_one_record_across_binder_restarts(cluster: Cluster) -> None:
    bound = await stopped(cluster)
    for _ in range(3):
        cluster.restart()
        await cluster.settle_after(minutes=7)
    assert [(r.spec.start, r.spec.end) for r in cluster.reserved()] == [(bound, None)]


async def test_a_reservation_that_ended_while_the_binder_was_down_ends_at_the_vmis_start(
    cluster: Cluster,
) -> None:
    await stopped(cluster)
    cluster.set_running("vm", True)
    scheduled = cluster.clock.advance(minutes=3)
    cluster.start("vm", scheduled=scheduled)  # no binder runs
    cluster.clock.advance(hours=1)
    cluster.restart()
    await cluster.settle()
    [record] = cluster.reserved()
    assert record.spec.end == scheduled


async def test_a_closed_reserved_record_is_never_written_again(cluster: Cluster) -> None:
    await stopped(cluster)
    cluster.set_running("vm", True)
    cluster.start("vm")
    await cluster.settle()
    [closed] = [r.metadata.resource_version for r in cluster.reserved()]
    await cluster.settle_after(hours=1)
    cluster.restart()
    await cluster.settle()
    assert [r.metadata.resource_version for r in cluster.reserved()] == [closed]


async def test_a_moved_reservation_continues_on_the_new_devices(cluster: Cluster) -> None:
    cluster.node("node-b")
    await stopped(cluster)
    [old] = cluster.set_of("vm")
    moved = cluster.clock.advance(hours=1)
    cluster.cordon(cluster.node_of("vm"))
    await cluster.settle()
    [new] = cluster.set_of("vm")
    assert new != old
    by_device = {r.spec.device: r for r in cluster.reserved()}
    assert by_device[old].spec.end == moved
    assert by_device[new].spec.start == moved and by_device[new].spec.end is None


async def test_the_tenants_copy_of_a_reservation_says_what_the_ledger_says(
    cluster: Cluster,
) -> None:
    await stopped(cluster)
    cluster.set_running("vm", True)
    cluster.start("vm")
    await cluster.settle()
    [record] = cluster.reserved()
    [copy] = [c for c in cluster.copies() if c.metadata.name == record.metadata.name]
    assert copy.spec == record.spec and copy.spec.end is not None


async def test_a_gpu_rebound_in_one_pass_closes_the_old_reservation_before_opening_the_next() -> (
    None
):
    # VM a's GPU is released (a deleted, no cleaning) and bound to b, which waited for it,
    # in the pass that first looks at a's record: the close and the open are staged
    # together. Written together, the ledger held two open Reserved records of one GPU
    # (chaos seed 5, invariant 11) — for a moment, or for good had the close been refused.
    cluster = Cluster()
    cluster.gpu_class(cleaning="None")
    [gpu] = cluster.node("node-a", gpus=1)
    cluster.vm("a")
    await cluster.settle()
    cluster.vm("b")
    await cluster.settle()
    open_when_written: list[tuple[str, list[str]]] = []
    opened = {r.metadata.name: r.spec.vm for r in cluster.reserved() if r.spec.end is None}
    assert list(opened.values()) == ["a"]

    def watch(kind: type[Any], event: WatchEvent[Any]) -> None:
        r = event.object
        if kind is not GPUUsageRecord or r.metadata.namespace != LEDGER:
            return
        if r.spec.kind != RecordKind.RESERVED or r.spec.device != gpu:
            return
        if r.spec.end is not None:
            opened.pop(r.metadata.name, None)
        elif r.metadata.name not in opened:
            open_when_written.append((r.spec.vm, sorted(opened.values())))
            opened[r.metadata.name] = r.spec.vm

    cluster.client.subscribe(watch)
    rebound = cluster.clock.advance(minutes=10)
    await cluster.delete_vm("a")
    await cluster.settle()
    assert cluster.set_of("b") == [gpu]
    assert open_when_written == [("b", [])]
    assert [(r.spec.vm, r.spec.end) for r in spans_by_vm(cluster.reserved())] == [
        ("a", rebound),
        ("b", None),
    ]


def spans_by_vm(records: list[GPUUsageRecord]) -> list[GPUUsageRecord]:
    return sorted(records, key=lambda r: r.spec.vm)


async def running(cluster: Cluster, gpus: int = 1) -> list[str]:
    """A VM bound while stopped, then started: its VMI runs on its GPUs (their names)."""
    await stopped(cluster, gpus=gpus)
    cluster.set_running("vm", True)
    cluster.start("vm")
    await cluster.settle()
    return sorted(cluster.set_of("vm"))


async def finished_while_down(cluster: Cluster, *, delete_vm: bool) -> datetime:
    """The VMI finishes an hour on (then its VM is deleted) while no binder runs; five
    minutes later a binder starts. Returns the finish."""
    finished = cluster.clock.advance(hours=1)
    cluster.finish("vm", at=finished)
    if delete_vm:
        await cluster.delete_vm("vm")
    cluster.clock.advance(minutes=5)
    cluster.restart()
    return finished


def reserved_from(cluster: Cluster, start: datetime) -> list[str]:
    """The devices with a Reserved record that starts then."""
    return sorted(r.spec.device for r in cluster.reserved() if r.spec.start == start)


async def test_a_vm_stopped_and_deleted_while_no_binder_ran_is_reserved_until_its_release(
    cluster: Cluster,
) -> None:
    # Its VMI finished, then the VM was deleted, and the binder came back: in one pass it
    # detached the GPU at the finish and released it. It was bound with no VMI on it from
    # the finish to the release, and that interval had no record (was: the Reserved step
    # ran after the release, when the GPU was bound to no one; the sim's invariant 12).
    await running(cluster)
    finished = await finished_while_down(cluster, delete_vm=True)
    await cluster.settle()
    assert cluster.set_of("vm") == []
    reservations = [(r.spec.start, r.spec.end) for r in cluster.reserved()]
    assert (finished, finished + timedelta(minutes=5)) in reservations


async def test_a_detach_in_a_pass_cut_short_is_reserved_until_the_release_that_follows(
    cluster: Cluster,
) -> None:
    # As above, but a conflict cut the pass short after one GPU's detach was written: the
    # sets step still released that GPU in the same pass while the Reserved step, which
    # opens the record of the interval the detach began, was skipped (the sim's
    # invariant 12, seed 202). No release may follow a detach whose interval has no record.
    devices = await running(cluster, gpus=2)
    finished = await finished_while_down(cluster, delete_vm=True)
    cluster.client.conflict_next_write(GPUDevice, devices[-1])
    await cluster.settle()
    assert cluster.set_of("vm") == []
    assert reserved_from(cluster, finished) == devices


async def test_a_deleted_gpu_is_reserved_from_its_vmis_end_to_its_removal_in_a_pass_cut_short(
    cluster: Cluster,
) -> None:
    # A GPU deleted while its VM ran waits for the VMI to end. It ended while no binder
    # ran; the binder came back, and a conflict cut its pass short before the detach:
    # the release of deleted devices (which runs in such a pass) took the GPU away still
    # attached, and the reservation from the VMI's end to the removal had no record.
    devices = await running(cluster, gpus=2)
    await cluster.delete_device(devices[0])
    await cluster.settle()
    finished = await finished_while_down(cluster, delete_vm=False)
    cluster.client.conflict_next_write(GPUDevice, devices[-1])
    await cluster.settle()
    assert devices[0] not in cluster.world.devices.by_name
    assert reserved_from(cluster, finished) == devices


async def test_a_start_attached_before_any_full_pass_keeps_its_reserved_seconds(
    cluster: Cluster,
) -> None:
    """The bind is a requests pass's and the attachment the next full pass's: the seconds
    between them are reserved, though no pass saw the device bound and unattached."""
    from .test_requests_in_memory import ask

    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2, running=True)
    bound = cluster.clock.now
    ask(cluster, "vm", 2)
    await cluster.answer_requests()
    scheduled = cluster.clock.advance(seconds=3)
    cluster.start("vm", scheduled=scheduled)
    cluster.clock.advance(seconds=1)
    await cluster.settle()
    assert spans(cluster.reserved()) == [("Reserved", bound, scheduled)] * 2
    assert spans(cluster.records()) == [("Attached", scheduled, None)] * 2
