"""gpu_binder_gpu_seconds_total on a real API server, across a leader change: a standby
started after the records closed exports what the leader exports (it reads the ledger,
not from zero), and when the leader stops and the standby takes its lease, no sample of
the standby's counters ever goes down, while it goes on with the same Reserved records."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from realcluster import BINDER_SA, Fleet, end_vmi, eventually, namespace, run_vmi, vmi_of

from conftest import StartBinder
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import GPUUsageRecord, RecordKind
from gpu_binder.binder.config import Config
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient, connect
from gpu_binder.kube.leaderelection import Timings
from gpu_binder.kube.manager import Manager, Options

pytestmark = pytest.mark.controlplane

CONFIG = Config(resync=timedelta(seconds=1))
SAMPLE = "gpu_binder_gpu_seconds_total"
KINDS = ("attached", "reserved")


def seconds(manager: Manager, ns: str, class_name: str) -> dict[str, float]:
    get = manager.metrics.registry.get_sample_value
    labels = {"namespace": ns, "class_name": class_name}
    return {k: get(SAMPLE, {**labels, "kind": k}) or 0.0 for k in KINDS}


async def test_the_gpu_seconds_counters_carry_over_a_leader_change_and_never_go_down(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    leader = await start_binder(CONFIG)
    vm = await fleet.create_vm(ns, "vm", gpus=1)
    await eventually(lambda: fleet.set_of(ns, "vm"), what="bound")
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(1)))
    await run_vmi(admin, vmi, node)
    await asyncio.sleep(2.1)  # finish times have whole seconds: past the record's start
    await end_vmi(admin, await admin.get(VirtualMachineInstance, "vm", ns))
    attached = await eventually(lambda: _closed_seconds(admin, leader, ns), what="closed")
    assert attached > 0
    await eventually(
        lambda: _equal(seconds(leader, ns, fleet.class_name)["attached"], attached),
        what="the leader's attached counter at the ledger's closed seconds",
    )

    # A second replica, started now: it reads the ledger, so it starts where it stands.
    client = await connect(str(control_plane.kubeconfig), impersonate=BINDER_SA)
    standby = Manager(
        client,
        CONFIG,
        Options(
            identity="standby",
            lease_name=leader.options.lease_name,
            timings=Timings(4.0, 3.0, 0.5),
            metrics_port=None,
        ),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(standby.run(stop))
    try:
        await eventually(
            lambda: _equal(seconds(standby, ns, fleet.class_name)["attached"], attached),
            what="the standby's attached counter at the ledger's",
        )
        assert not standby.is_leader()
        before = seconds(leader, ns, fleet.class_name)
        reserved = await _reserved(admin, leader, ns)
        samples = [seconds(standby, ns, fleet.class_name)]
        await start_binder.stop(leader)  # a clean stop hands the lease over at once
        # Sampled until it leads and the stopped VM's open reservation (counted up to 10 s
        # behind now, as every replica counts an open record) has grown under it.
        async with asyncio.timeout(30):
            while not (standby.is_leader() and samples[-1]["reserved"] > before["reserved"]):
                await asyncio.sleep(0.1)
                samples.append(seconds(standby, ns, fleet.class_name))
                assert not task.done()
        for kind in KINDS:
            series = [s[kind] for s in samples]
            assert series == sorted(series), (kind, series)
            assert series[-1] >= before[kind], (kind, before, series[-1])
        # The new leader goes on with the same Reserved records: one per interval.
        assert await _reserved(admin, standby, ns) == reserved
    finally:
        stop.set()
        await task
        await client.close()


async def _closed_seconds(admin: KubeClient, manager: Manager, ns: str) -> float:
    ledger = manager.config.ledger_namespace
    items = (await admin.list(GPUUsageRecord, ledger)).items
    mine = [r for r in items if r.spec.namespace == ns and r.spec.kind == RecordKind.ATTACHED]
    if not mine or any(r.spec.end is None for r in mine):
        return 0.0
    return sum((r.spec.end - r.spec.start).total_seconds() for r in mine if r.spec.end)


async def _reserved(admin: KubeClient, manager: Manager, ns: str) -> list[tuple[str, str | None]]:
    items = (await admin.list(GPUUsageRecord, manager.config.ledger_namespace)).items
    mine = [r for r in items if r.spec.namespace == ns and r.spec.kind == RecordKind.RESERVED]
    return sorted((r.metadata.name, r.spec.end and r.spec.end.isoformat()) for r in mine)


async def _equal(value: float, wanted: float) -> bool:
    return value == wanted
