"""Where the ledger lives: every usage record in the ledger namespace, which no tenant's
deletion of a VM, a VMI or its whole namespace reaches, and a copy of each in the
tenant's namespace for it to read; records from before the ledger are moved into it."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import (
    RECORD_CLOSED,
    RECORD_COPY_LABEL,
    RECORD_NAMESPACE_LABEL,
    RECORD_STATE_LABEL,
    GPUUsageRecord,
)
from gpu_binder.binder.config import Config

from .cluster import LEDGER, NAMESPACE, Cluster


async def running(cluster: Cluster, gpus: int = 1) -> list[str]:
    cluster.node("node-a")
    cluster.vm("vm", gpus, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    return cluster.set_of("vm")


def legacy(record: GPUUsageRecord) -> GPUUsageRecord:
    """The record as a binder before the ledger wrote it: in the tenant's namespace,
    labelled only with its VM and state, its spec naming no namespace."""
    labels = {k: v for k, v in record.metadata.labels.items() if k != RECORD_NAMESPACE_LABEL}
    meta = record.metadata.model_copy(
        update={"namespace": NAMESPACE, "labels": labels, "resource_version": ""}
    )
    spec = record.spec.model_copy(update={"namespace": ""})
    return record.model_copy(update={"metadata": meta, "spec": spec})


async def back_to_before_the_ledger(cluster: Cluster) -> list[GPUUsageRecord]:
    """Every record of the ledger put back where an older binder kept it."""
    out = []
    for r in cluster.ledger():
        await cluster.client.delete(GPUUsageRecord, r.metadata.name, LEDGER)
        await cluster.client.delete(GPUUsageRecord, r.metadata.name, NAMESPACE)
        out.append(cluster.client.put(legacy(r)))
    return out


async def test_a_record_lives_in_the_ledger_namespace_naming_its_tenant(cluster: Cluster) -> None:
    await running(cluster)
    [record] = cluster.records()
    assert record.metadata.namespace == LEDGER
    assert record.spec.namespace == NAMESPACE
    assert record.metadata.labels[RECORD_NAMESPACE_LABEL] == NAMESPACE


async def test_the_tenant_reads_a_copy_of_each_record_in_its_own_namespace(
    cluster: Cluster,
) -> None:
    await running(cluster)
    records = {r.metadata.name: r for r in cluster.ledger()}
    copies = {c.metadata.name: c for c in cluster.copies()}
    assert copies.keys() == records.keys()
    for name, copy in copies.items():
        assert copy.spec == records[name].spec
        assert copy.metadata.labels[RECORD_COPY_LABEL] == LEDGER


async def test_a_copy_is_closed_with_its_record(cluster: Cluster) -> None:
    await running(cluster)
    finished = cluster.clock.advance(hours=2)
    await cluster.stop("vm")
    await cluster.settle()
    [record] = cluster.records()
    copy = next(c for c in cluster.copies() if c.metadata.name == record.metadata.name)
    assert copy.spec.end == record.spec.end == finished
    assert copy.metadata.labels[RECORD_STATE_LABEL] == RECORD_CLOSED


class Slow:
    """The binder's client: each write takes a moment, so a step's writes are in flight
    together, as they are against an API server."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def update(self, obj: Any) -> Any:
        await asyncio.sleep(0.001)
        return await self.client.update(obj)

    async def create(self, obj: Any) -> Any:
        await asyncio.sleep(0.001)
        return await self.client.create(obj)


async def test_a_copy_is_not_closed_while_its_records_close_is_refused(cluster: Cluster) -> None:
    await running(cluster)
    [record] = cluster.records()
    cluster.client.conflict_next_write(GPUUsageRecord, record.metadata.name, LEDGER)
    cluster.binder.client = Slow(cluster.binder.client)
    cluster.finish("vm", at=cluster.clock.advance(hours=1))
    await cluster.run()
    assert [r.spec.end for r in cluster.records()] == [None], "the close lost to a writer"
    [copy] = [c for c in cluster.copies() if c.metadata.name == record.metadata.name]
    assert copy.spec.end is None, "a copy never says more than the ledger"


async def test_deleting_the_tenants_namespace_loses_no_record(cluster: Cluster) -> None:
    await running(cluster, gpus=2)
    opened = [r.metadata.name for r in cluster.records()]
    finished = cluster.clock.advance(hours=3)
    # The namespace controller deletes everything in it: the copies, the VM, its VMI,
    # which KubeVirt ends and the usage finalizer holds until the binder closed its records.
    for copy in cluster.copies():
        await cluster.client.delete(GPUUsageRecord, copy.metadata.name, NAMESPACE)
    await cluster.delete_vm("vm")
    cluster.finish("vm", at=finished)
    await cluster.remove_vmi("vm")
    await cluster.settle_after(seconds=5)
    assert cluster.client.peek(VirtualMachineInstance, "vm", NAMESPACE) is None
    assert cluster.client.peek(VirtualMachine, "vm", NAMESPACE) is None
    records = cluster.records()
    assert [r.metadata.name for r in records] == opened
    assert [r.spec.end for r in records] == [finished, finished]


async def test_a_namespace_deletion_that_took_the_copies_is_not_undone(cluster: Cluster) -> None:
    await running(cluster)
    for copy in cluster.copies():
        await cluster.client.delete(GPUUsageRecord, copy.metadata.name, NAMESPACE)
    cluster.clock.advance(minutes=10)
    await cluster.settle()
    assert cluster.copies() == []


async def test_a_copy_a_new_leader_finds_missing_is_written_again(cluster: Cluster) -> None:
    await running(cluster)
    [record] = cluster.records()
    await cluster.client.delete(GPUUsageRecord, record.metadata.name, NAMESPACE)
    cluster.restart()
    await cluster.settle()
    assert [c.spec for c in cluster.copies() if c.metadata.name == record.metadata.name] == [
        record.spec
    ]


async def test_a_copy_whose_write_failed_is_closed_from_the_ledger(cluster: Cluster) -> None:
    await running(cluster)
    [record] = cluster.records()
    cluster.client.conflict_next_write(GPUUsageRecord, record.metadata.name, NAMESPACE)
    finished = cluster.clock.advance(hours=1)
    cluster.finish("vm", at=finished)
    await cluster.settle()
    copy = next(c for c in cluster.copies() if c.metadata.name == record.metadata.name)
    assert copy.spec.end == finished
    assert copy.metadata.labels[RECORD_STATE_LABEL] == RECORD_CLOSED


async def test_a_tenant_in_the_ledger_namespace_gets_no_copy() -> None:
    cluster = Cluster(config=Config(ledger_namespace=NAMESPACE))
    cluster.gpu_class()
    await running(cluster)
    [record] = [r for r in cluster.ledger() if r.spec.vmi is not None]
    assert record.metadata.namespace == NAMESPACE
    assert not any(RECORD_COPY_LABEL in r.metadata.labels for r in cluster.ledger())


async def test_an_open_record_from_before_the_ledger_moves_into_it_and_closes_there(
    cluster: Cluster,
) -> None:
    await running(cluster)
    [old] = [r for r in await back_to_before_the_ledger(cluster) if r.spec.vmi is not None]
    cluster.restart()  # the upgraded binder
    await cluster.settle()
    finished = cluster.clock.advance(hours=1)
    cluster.finish("vm", at=finished)
    await cluster.settle()
    [record] = cluster.records()
    assert record.metadata.name == old.metadata.name
    assert (record.metadata.namespace, record.spec.end) == (LEDGER, finished)
    [copy] = [c for c in cluster.copies() if c.metadata.name == old.metadata.name]
    assert copy.metadata.labels[RECORD_COPY_LABEL] == LEDGER and copy.spec.end == finished


async def test_a_closed_record_from_before_the_ledger_moves_into_it_unchanged(
    cluster: Cluster,
) -> None:
    await running(cluster)
    cluster.finish("vm")
    await cluster.settle()
    await cluster.delete_vm("vm")  # its VMI goes with it
    await cluster.settle()
    before = await back_to_before_the_ledger(cluster)
    cluster.restart()
    await cluster.settle()
    moved = {r.metadata.name: r for r in cluster.ledger()}
    assert moved.keys() == {r.metadata.name for r in before}
    for old in before:
        assert moved[old.metadata.name].spec == old.spec.model_copy(update={"namespace": NAMESPACE})
    # The old one stays as the tenant's copy; its spec, closed, is never changed.
    for copy in cluster.copies():
        assert copy.metadata.labels[RECORD_COPY_LABEL] == LEDGER
        assert copy.spec.namespace == ""
    cluster.restart()
    assert await cluster.settle() == 0, "moved once: a later leader finds nothing to move"
