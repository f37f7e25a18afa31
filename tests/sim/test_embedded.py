"""The sim's building blocks around the real binder and webhook: one VM's life, lawfully."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import GPUDevice, GPUUsageRecord, Phase
from gpu_binder.binder.events import ClientRecorder
from gpu_binder.binder.ledger import of_ledger
from gpu_binder.binder.reconciler import PASS_KEY, REQUESTS_KEY
from gpu_binder.sim.admission import call_webhook
from gpu_binder.sim.agent import AgentFleet
from gpu_binder.sim.binderhost import BinderHost
from gpu_binder.sim.builders import vm_object, vmi_object
from gpu_binder.sim.catalog import H100, L40S, gpu_class
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.cluster import ClassDef, Cluster
from gpu_binder.sim.invariants import InvariantChecker, quiet_pass
from gpu_binder.sim.kubelet import Kubelet
from gpu_binder.sim.kubevirt import KubeVirtSim
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook.decision import Admitter

RESOURCE = "nvidia.com/H100"


class Embedded:
    def __init__(self, store: MemoryClient, clock: VirtualClock) -> None:
        self.store, self.clock = store, clock
        self.host = BinderHost(clock.now, client=store)
        self.world = self.host.world
        self.binder = self.host.reconciler(ClientRecorder(store))
        self.admitter = Admitter(self.world, store, clock=clock.now)
        self.fleet = AgentFleet(store, clock.now)
        self.kubevirt = KubeVirtSim(store, clock.now, self.admit)
        self.kubelet = Kubelet(store, clock.now)
        self.checker = InvariantChecker(store)

    async def admit(self, vmi: dict[str, Any]) -> dict[str, Any] | str:
        answer = functools.partial(self.binder.reconcile, REQUESTS_KEY)
        return (await call_webhook(self.admitter, self.store, vmi, answer, uid="r")).outcome

    async def settle(self) -> None:
        for _ in range(50):
            result = await self.binder.reconcile(PASS_KEY)
            # An aborted pass is requeued (after 100 ms in a real cluster), so it counts.
            writes = result.writes + int(result.aborted)
            for part in (self.fleet, self.kubevirt, self.kubelet):
                writes += await part.step()
            if writes == 0:
                return
        raise AssertionError("the cluster did not settle in 50 rounds")


@pytest.fixture
async def cluster(store: MemoryClient, clock: VirtualClock) -> Embedded:
    c = Embedded(store, clock)
    await store.create(gpu_class("h100", H100, RESOURCE))
    for node in ("n1", "n2"):
        await c.fleet.add_node(node, 4)
    await c.settle()
    return c


def attached(store: MemoryClient) -> list[GPUDevice]:
    return [d for d in store.objects(GPUDevice) if d.status.phase == Phase.ATTACHED]


async def test_a_started_vm_runs_on_its_pinned_gpus(store: MemoryClient, cluster: Embedded) -> None:
    await store.create(vm_object("vm1", "t", [RESOURCE, RESOURCE]))
    await cluster.settle()
    assert cluster.kubelet.started == 1 and len(attached(store)) == 2
    assert cluster.checker.check() == []


async def test_a_stopped_vm_closes_its_usage_records_at_the_finish_time(
    store: MemoryClient, cluster: Embedded, clock: VirtualClock
) -> None:
    await store.create(vm_object("vm1", "t", [RESOURCE]))
    await cluster.settle()
    clock.advance(3600)
    await cluster.kubevirt.set_running("t", "vm1", False)
    await cluster.settle()
    [record] = of_ledger(store.objects(GPUUsageRecord))
    assert record.spec.end == clock.now()
    assert cluster.checker.check() == []


async def test_a_settled_cluster_passes_without_writing(
    store: MemoryClient, cluster: Embedded
) -> None:
    await store.create(vm_object("vm1", "t", [RESOURCE]))
    await cluster.settle()
    assert await quiet_pass(store, lambda: cluster.binder.reconcile(PASS_KEY)) == []


async def test_an_unmanaged_vmi_is_adopted_after_the_grace(
    store: MemoryClient, clock: VirtualClock
) -> None:
    c = Embedded(store, clock)
    await store.create(gpu_class("l40s", L40S, "nvidia.com/L40S", pinning="Node"))
    await c.fleet.add_node("n1", 2, L40S)
    await c.settle()
    await c.kubevirt.create_vmi(vmi_object("lone", "t", ["nvidia.com/L40S"]), admitted=False)
    await c.settle()
    clock.advance(c.binder.config.attachment_grace.total_seconds() + 1)
    await c.settle()
    bound = [d for d in store.objects(GPUDevice) if d.status.binding is not None]
    assert [d.status.binding.vm.key for d in bound if d.status.binding] == ["t/lone"]
    assert c.checker.check() == []


async def test_a_vm_stopped_while_the_binder_is_down_is_billed_until_its_finish_time() -> None:
    """KubeVirt ends the VMI and deletes it during the outage; the webhook's finalizer
    holds it, so the binder that comes back still reads its finish time (invariant 6)."""
    c = Cluster([ClassDef("h100", RESOURCE, H100)])
    await c.add_node("n1", "h100", 4)
    c.add_vm("t", "vm1", {"h100": 2}, running=True)
    await c.settle()
    assert [r.spec.end for r in of_ledger(c.client.objects(GPUUsageRecord))] == [None, None]
    c.binder_up = False
    await c.tick(600)
    finished = c.clock()
    await c.set_running("t/vm1", False)
    await c.tick(3600)
    c.binder_up = True
    c.restart_binder()
    await c.settle()
    assert [r.spec.end for r in of_ledger(c.client.objects(GPUUsageRecord))] == [finished, finished]
    assert c.client.objects(VirtualMachineInstance) == []
    assert c.check() == []


async def test_the_binders_cache_holds_only_open_records_before_and_after_a_new_leader() -> None:
    c = Cluster([ClassDef("h100", RESOURCE, H100)])
    await c.add_node("n1", "h100", 4)
    c.add_vm("t", "vm1", {"h100": 1}, running=True)
    c.add_vm("t", "vm2", {"h100": 1}, running=True)
    await c.settle()
    await c.set_running("t/vm1", False)
    assert sorted(r.spec.vm for r in of_ledger(c.client.objects(GPUUsageRecord))) == ["vm1", "vm2"]
    assert [r.spec.vm for r in of_ledger(c.world.records.values())] == ["vm2"]
    c.restart_binder()
    assert [r.spec.vm for r in of_ledger(c.world.records.values())] == ["vm2"]
    assert c.check() == []


async def test_a_run_stopped_by_violations_says_how_many_events_it_played(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpu_binder.sim import command

    monkeypatch.setattr(command.Cluster, "check", lambda self: ["(1) made up"])
    figures = await command.run(2, 2, 4, 100, 1, False, max_violations=3)
    assert figures["events"] == 4 and figures["violation_counts"] == {"(1)": 4}


async def test_under_the_stage_rollout_strategy_no_vmi_affinity_is_synced() -> None:
    from gpu_binder.sim.command import run

    stage = await run(4, 4, 12, 60, 1, True, max_violations=0, live_update=False)
    live = await run(4, 4, 12, 60, 1, True, max_violations=0)
    assert stage["affinity_syncs"] == 0 < live["affinity_syncs"]


async def test_kubevirt_racing_the_binder_schedules_a_start_seconds_after_its_bind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under `race` KubeVirt may act first: the VMI created and bound by its request, its
    pod scheduled seconds later, before any full pass; the reserved seconds between are
    billed (what --chaos found unbilled before the binder's fix: invariant 12)."""
    from gpu_binder.api.types import RecordKind
    from gpu_binder.sim import cluster as simcluster

    monkeypatch.setattr(simcluster, "KUBEVIRT_FIRST_ODDS", 1.0)
    c = Cluster([ClassDef("h100", RESOURCE, H100)], race=True)
    await c.add_node("n1", "h100", 4)
    await c.settle()
    c.add_vm("t", "vm1", {"h100": 2}, running=True)
    await c.settle()
    records = of_ledger(c.client.objects(GPUUsageRecord), None)
    reserved = [(r.spec.start, r.spec.end) for r in records if r.spec.kind == RecordKind.RESERVED]
    attached = [r.spec.start for r in records if r.spec.kind == RecordKind.ATTACHED]
    assert c.stats.requests_bound == 1
    assert len(reserved) == 2 and len(set(reserved)) == 1 and len(set(attached)) == 1
    start, end = reserved[0]
    assert end == attached[0]
    assert end is not None and (end - start).total_seconds() >= simcluster.KUBEVIRT_STEP_SECONDS
