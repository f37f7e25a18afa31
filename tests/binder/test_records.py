"""Usage records: one per attachment interval, closed with the VMI's finish time, never
duplicated, surviving binder restarts; and the webhook's usage finalizer, which keeps a
VMI (and its finish time) until its records are closed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import (
    RECORD_CLOSED,
    RECORD_OPEN,
    RECORD_STATE_LABEL,
    USAGE_FINALIZER,
    GPUUsageRecord,
    RecordKind,
    usage_record_name,
)
from gpu_binder.binder.config import Config
from gpu_binder.client.interface import WatchEvent

from .cluster import LEDGER, NAMESPACE, Cluster


def attached_in_cache(cluster: Cluster) -> list[GPUUsageRecord]:
    """The Attached records the binder's cache holds."""
    return [r for r in cluster.world.records.values() if r.spec.kind == RecordKind.ATTACHED]


async def running(cluster: Cluster, gpus: int = 2) -> list[str]:
    cluster.node("node-a")
    cluster.vm("vm", gpus, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    return cluster.set_of("vm")


async def test_an_attachment_opens_one_record_per_device(cluster: Cluster) -> None:
    devices = await running(cluster)
    vmi = cluster.vmi("vm")
    records = cluster.records()
    assert sorted(r.spec.device for r in records) == devices
    for r in records:
        assert (r.metadata.namespace, r.spec.namespace) == (LEDGER, NAMESPACE)
        assert r.metadata.name == usage_record_name(vmi.metadata.uid, r.spec.device)
        assert (r.spec.vm, r.spec.vmi.name, r.spec.vmi.uid) == ("vm", "vm", vmi.metadata.uid)
        assert (r.spec.class_name, r.spec.node_name) == ("h100", "node-a")
        assert r.spec.start == cluster.clock.now and r.spec.end is None


async def test_a_record_is_closed_with_the_vmis_finish_time_not_when_noticed(
    cluster: Cluster,
) -> None:
    await running(cluster)
    finished = cluster.clock.advance(hours=2)
    cluster.finish("vm", at=finished)
    await cluster.settle_after(minutes=7)
    assert [r.spec.end for r in cluster.records()] == [finished, finished]


async def test_a_record_is_closed_with_the_finish_time_of_a_vmi_already_deleted(
    cluster: Cluster,
) -> None:
    await running(cluster)
    finished = cluster.clock.advance(hours=2)
    await cluster.stop("vm")
    await cluster.settle_after(seconds=20)
    assert [r.spec.end for r in cluster.records()] == [finished, finished]


async def test_records_are_never_duplicated(cluster: Cluster) -> None:
    await running(cluster)
    for _ in range(3):
        await cluster.settle_after(minutes=1)
    assert len(cluster.records()) == 2


async def test_every_start_of_a_vm_is_a_new_interval(cluster: Cluster) -> None:
    await running(cluster, gpus=1)
    await cluster.settle_after(hours=1)
    await cluster.stop("vm")
    await cluster.settle_after(hours=1)
    cluster.set_running("vm", True)
    cluster.start("vm")
    await cluster.settle()
    first, second = sorted(cluster.records(), key=lambda r: r.spec.start)
    assert first.spec.end is not None and second.spec.end is None
    assert first.spec.vmi.uid != second.spec.vmi.uid


async def test_records_survive_a_binder_restart_without_duplicates(cluster: Cluster) -> None:
    await running(cluster)
    before = [r.metadata.resource_version for r in cluster.records()]
    cluster.restart()
    await cluster.settle_after(minutes=1)
    assert [r.metadata.resource_version for r in cluster.records()] == before


async def test_an_interval_that_ended_while_the_binder_was_down_closes_at_the_finish_time(
    cluster: Cluster,
) -> None:
    await running(cluster)
    finished = cluster.clock.advance(hours=1)
    cluster.finish("vm", at=finished)
    cluster.clock.advance(hours=3)  # the binder is down meanwhile
    cluster.restart()
    await cluster.settle()
    assert [r.spec.end for r in cluster.records()] == [finished, finished]


async def test_an_interval_that_began_while_the_binder_was_down_opens_at_the_vmis_start(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    scheduled = cluster.clock.now
    cluster.start("vm", scheduled=scheduled)
    cluster.clock.advance(minutes=10)  # the binder is down meanwhile
    cluster.restart()
    await cluster.settle()
    assert [r.spec.start for r in cluster.records()] == [scheduled, scheduled]


async def test_records_open_and_close_even_when_the_binder_is_disabled(
    cluster: Cluster,
) -> None:
    await running(cluster)
    first = cluster.records()
    cluster.restart(Config(enabled=False))
    finished = cluster.clock.advance(hours=1)
    cluster.finish("vm", at=finished)
    await cluster.settle_after(minutes=1)
    assert [r.spec.end for r in cluster.records()] == [finished, finished]
    assert [r.metadata.name for r in cluster.records()] == [r.metadata.name for r in first]


async def test_a_closed_record_is_never_written_again(cluster: Cluster) -> None:
    await running(cluster)
    cluster.finish("vm")
    await cluster.settle()
    closed = [r.metadata.resource_version for r in cluster.records()]
    await cluster.settle_after(hours=1)
    assert [r.metadata.resource_version for r in cluster.records()] == closed


# --- the binder caches open records only: closed ones are the usage report's ----------


def state(r: GPUUsageRecord) -> str | None:
    return r.metadata.labels.get(RECORD_STATE_LABEL)


def relabelled(r: GPUUsageRecord, **update: object) -> GPUUsageRecord:
    """The record as stored with its labels (and spec fields) changed by someone else."""
    labels = {k: v for k, v in r.metadata.labels.items() if k != RECORD_STATE_LABEL}
    if update.pop("state", None) is not None:
        labels[RECORD_STATE_LABEL] = RECORD_CLOSED
    meta = r.metadata.model_copy(update={"labels": labels})
    return r.model_copy(update={"metadata": meta, "spec": r.spec.model_copy(update=update)})


async def test_a_closed_record_leaves_the_binders_cache(cluster: Cluster) -> None:
    await running(cluster)
    assert [state(r) for r in cluster.records()] == [RECORD_OPEN, RECORD_OPEN]
    assert len(attached_in_cache(cluster)) == 2
    cluster.finish("vm")
    await cluster.settle()
    assert [state(r) for r in cluster.records()] == [RECORD_CLOSED, RECORD_CLOSED]
    assert all(r.spec.end is not None for r in cluster.records())
    assert attached_in_cache(cluster) == [] and not cluster.world.open_attached


async def test_a_new_leaders_relist_holds_only_open_records(cluster: Cluster) -> None:
    await running(cluster, gpus=1)
    cluster.vm("other", 1, running=True)
    await cluster.settle()
    cluster.start("other")
    await cluster.settle()
    cluster.finish("vm")
    await cluster.settle()
    cluster.restart()
    await cluster.settle()
    held = [r.spec.vm for r in attached_in_cache(cluster)]
    assert held == ["other"] and len(cluster.records()) == 2


async def test_opening_a_record_that_exists_closed_is_no_error(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    (device,) = await running(cluster, gpus=1)
    (record,) = cluster.records()
    # Closed while its device stays attached (say by hand): the binder's cache drops it,
    # and its attachment would open the same record again.
    closed = cluster.client.put(relabelled(record, state=RECORD_CLOSED, end=cluster.clock.now))
    assert cluster.world.records == {}
    opened: list[str] = []
    create = cluster.client.create

    async def counted(obj: Any, dry_run: bool = False) -> Any:
        if isinstance(obj, GPUUsageRecord):
            opened.append(obj.metadata.name)
        return await create(obj, dry_run)

    monkeypatch.setattr(cluster.client, "create", counted)
    cluster.restart()  # a new leader, with nothing remembered of the record
    result = await cluster.run()
    assert not result.errors and not result.aborted
    assert opened == [record.metadata.name]
    # Already recorded: a change of its device does not try to open it again.
    cluster.set_unschedulable(device)
    await cluster.settle()
    assert opened == [record.metadata.name] and cluster.records() == [closed]


async def test_an_unlabelled_open_record_from_before_the_label_is_still_closed(
    cluster: Cluster,
) -> None:
    await running(cluster, gpus=1)
    (record,) = cluster.records()
    # As a binder before the label (and before the ledger) wrote it: in the tenant's
    # namespace, unlabelled.
    await cluster.client.delete(GPUUsageRecord, record.metadata.name, LEDGER)
    await cluster.client.delete(GPUUsageRecord, record.metadata.name, NAMESPACE)
    legacy = relabelled(record, namespace="")
    meta = legacy.metadata.model_copy(update={"namespace": NAMESPACE, "labels": {}})
    cluster.client.put(legacy.model_copy(update={"metadata": meta}))
    cluster.restart()  # the upgraded binder
    await cluster.settle()
    finished = cluster.clock.advance(hours=1)
    cluster.finish("vm", at=finished)
    await cluster.settle()
    (record,) = cluster.records()
    assert record.spec.end == finished and state(record) == RECORD_CLOSED


# --- the usage finalizer: a VMI stays until its records are closed -------------------


def held(cluster: Cluster, name: str = "vm") -> bool:
    """Whether the VMI is still there with the webhook's usage finalizer."""
    vmi = cluster.client.peek(VirtualMachineInstance, name, NAMESPACE)
    return vmi is not None and USAGE_FINALIZER in vmi.metadata.finalizers


async def test_a_vmi_ended_and_deleted_while_the_binder_was_down_is_billed_to_its_finish(
    cluster: Cluster,
) -> None:
    await running(cluster)
    finished = cluster.clock.advance(hours=1)
    await cluster.stop("vm")  # KubeVirt ends and deletes it; no binder runs
    cluster.clock.advance(hours=3)
    cluster.restart()
    await cluster.settle()
    assert [r.spec.end for r in cluster.records()] == [finished, finished]


async def test_the_usage_finalizer_goes_once_the_records_are_closed_and_then_the_vmi_goes(
    cluster: Cluster,
) -> None:
    await running(cluster)
    await cluster.stop("vm")
    assert held(cluster), "deleted, it waits for the binder"
    seen: list[str] = []

    def follow(kind: type, e: WatchEvent[Any]) -> None:
        r = e.object
        if kind is GPUUsageRecord and r.spec.end is not None and r.metadata.namespace == LEDGER:
            seen.append("record closed")
        elif kind is VirtualMachineInstance and e.type == "DELETED":
            seen.append("VMI gone")

    cluster.client.subscribe(follow)
    await cluster.settle()
    assert seen == ["record closed", "record closed", "VMI gone"]


async def test_an_ended_vmi_not_deleted_loses_the_usage_finalizer_once_its_records_close(
    cluster: Cluster,
) -> None:
    await running(cluster)
    cluster.finish("vm")
    await cluster.settle()
    assert all(r.spec.end is not None for r in cluster.records())
    assert cluster.vmi("vm").phase == "Succeeded" and not held(cluster)


async def test_a_vmi_deleted_before_it_ever_ran_loses_the_usage_finalizer_at_once(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    cluster.start("vm", node="", phase="Pending")
    await cluster.settle()
    assert held(cluster)
    await cluster.remove_vmi("vm")
    await cluster.settle()
    assert cluster.client.peek(VirtualMachineInstance, "vm", NAMESPACE) is None
    assert cluster.records() == []


async def test_a_vmi_deleted_while_running_keeps_the_usage_finalizer_until_it_finishes(
    cluster: Cluster,
) -> None:
    await running(cluster)
    await cluster.remove_vmi("vm")  # the guest shuts down: its GPUs are in use until then
    await cluster.settle_after(minutes=2)
    assert held(cluster)
    assert [r.spec.end for r in cluster.records()] == [None, None]
    finished = cluster.clock.advance(minutes=1)
    cluster.finish("vm", at=finished)
    await cluster.settle()
    assert cluster.client.peek(VirtualMachineInstance, "vm", NAMESPACE) is None
    assert [r.spec.end for r in cluster.records()] == [finished, finished]


async def test_the_usage_finalizer_is_removed_even_when_the_binder_is_disabled(
    cluster: Cluster,
) -> None:
    await running(cluster)
    cluster.restart(Config(enabled=False))
    await cluster.stop("vm")
    await cluster.settle()
    assert cluster.client.peek(VirtualMachineInstance, "vm", NAMESPACE) is None
    assert all(r.spec.end is not None for r in cluster.records())


async def test_a_conflict_on_removing_the_usage_finalizer_is_retried_on_a_fresh_read(
    cluster: Cluster,
) -> None:
    await running(cluster)
    await cluster.stop("vm")
    cluster.client.conflict_next_write(VirtualMachineInstance, "vm", NAMESPACE)
    result = await cluster.run()
    assert result.aborted and held(cluster)
    await cluster.settle()
    assert cluster.client.peek(VirtualMachineInstance, "vm", NAMESPACE) is None


async def test_removing_the_usage_finalizer_keeps_the_other_finalizers(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    cluster.start("vm", finalizers=["kubevirt.io/foreground", USAGE_FINALIZER])
    await cluster.settle()
    cluster.finish("vm")
    await cluster.settle()
    assert cluster.vmi("vm").metadata.finalizers == ("kubevirt.io/foreground",)


async def test_a_backdated_finish_never_ends_a_record_before_the_binder_saw_the_vmi_live(
    cluster: Cluster,
) -> None:
    """A VMI's status is its tenant's to write: Succeeded, stamped a second after the start,
    arriving two hours on. The record ends when the binder last saw it live, not then."""
    await running(cluster)
    start = cluster.clock.now
    seen = cluster.clock.advance(hours=2)
    cluster.finish("vm", at=start + timedelta(seconds=1))
    await cluster.settle_after(seconds=5)
    assert [r.spec.end for r in cluster.records()] == [seen, seen]


async def waiting_for_a_gpu(cluster: Cluster, running: bool) -> str:
    """One GPU, held by VM a (running, or bound while stopped); VM b, running, waits for it."""
    cluster.gpu_class(cleaning="None")
    [gpu] = cluster.node("node-a", gpus=1)
    cluster.vm("a", running=running)
    await cluster.settle()
    if running:
        cluster.start("a")
        await cluster.settle()
    cluster.vm("b", running=True)
    await cluster.settle()
    assert cluster.bound_to(gpu) == "a"
    return gpu


async def test_a_vmi_scheduled_before_its_gpu_was_bound_is_billed_from_the_bind() -> None:
    # b's launcher pod got its node at `scheduled` and waited for a GPU that a held,
    # reserved, until a went: b's use begins at the bind, not at its Scheduled time (was:
    # Attached from `scheduled`, beside a's Reserved record of the same GPU).
    cluster = Cluster()
    gpu = await waiting_for_a_gpu(cluster, running=False)
    scheduled = cluster.clock.advance(minutes=5)
    released = cluster.clock.advance(minutes=5)
    await cluster.delete_vm("a")
    await cluster.settle()
    binding = cluster.device(gpu).status.binding
    assert binding is not None and binding.bound_at == released
    cluster.start("b", scheduled=scheduled)
    await cluster.settle()
    [reserved_a] = [r for r in cluster.reserved() if r.spec.vm == "a"]
    [attached_b] = cluster.records()
    assert reserved_a.spec.end == released
    assert attached_b.spec.start == released


async def test_an_attachment_after_the_device_was_written_anew_begins_after_the_last_one() -> None:
    # Chaos seeds 101/202/303: a's VMI detached at `finished`, then the device was deleted
    # and its agent wrote it anew, without detachedAt; b, whose launcher pod was scheduled
    # at `scheduled` while it waited, got the GPU. Its record opened at `scheduled`, inside
    # a's [start, finished): two Attached records of one GPU overlapping (invariant 11).
    cluster = Cluster()
    gpu = await waiting_for_a_gpu(cluster, running=True)
    scheduled = cluster.clock.advance(minutes=5)
    finished = cluster.clock.advance(minutes=5)
    cluster.finish("a", at=finished)
    await cluster.remove_vmi("a")
    await cluster.delete_vm("a")
    await cluster.settle()
    await cluster.delete_device(gpu)
    await cluster.settle()
    cluster.node("node-a", gpus=1)
    await cluster.settle()
    assert cluster.device(gpu).status.detached_at is None
    assert cluster.bound_to(gpu) == "b"
    cluster.start("b", scheduled=scheduled)
    await cluster.settle()
    by_vm = {r.spec.vm: r for r in cluster.records()}
    assert by_vm["a"].spec.end == finished
    assert by_vm["b"].spec.start == finished and by_vm["b"].spec.end is None


async def test_a_vmi_stamped_scheduled_by_a_clock_behind_is_billed_from_when_it_started(
    cluster: Cluster,
) -> None:
    # virt-controller's clock 9 minutes behind the binder's: the VMI, seen Scheduling
    # until now, says it was Scheduled 9 minutes ago. Its GPUs are billed Attached from
    # now, when the binder saw it start, and Reserved until then (was: Attached from the
    # stamp, Reserved 9 minutes short; the sim's invariant 12 under skewed clocks).
    cluster.node("node-a")
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    bound = cluster.clock.now
    first = cluster.start("vm", phase="Scheduling")
    raw = first.to_dict()
    raw["status"] = {"phase": "Scheduling"}  # its launcher pod has no node yet
    cluster.client.put(VirtualMachineInstance.from_dict(raw))
    await cluster.settle()
    assert cluster.records() == []
    started = cluster.clock.advance(minutes=10)
    vmi = cluster.start("vm", scheduled=started - timedelta(minutes=9))
    assert vmi.metadata.uid == first.metadata.uid
    await cluster.settle()
    [attached] = cluster.records()
    [reserved] = cluster.reserved()
    assert attached.spec.start == started
    assert (reserved.spec.start, reserved.spec.end) == (bound, started)
