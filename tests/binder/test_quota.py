"""GPU quotas: a namespace's ResourceQuota limits on a class's resourceName hold for
every GPU it holds, attached or reserved for a stopped VM; an order past them waits and
a start past them is refused, with the numbers; a lowered quota disturbs nothing held."""

from __future__ import annotations

import pytest

from gpu_binder.api.quota import ResourceQuota
from gpu_binder.api.types import RequestPhase

from .cluster import A100, A100_DEVICE_ID, A100_RESOURCE, H100, H100_RESOURCE, NAMESPACE, Cluster

REQUESTS = f"requests.{H100_RESOURCE}"
LIMITS = f"limits.{H100_RESOURCE}"


def quota(
    cluster: Cluster,
    hard: dict[str, str],
    name: str = "gpus",
    namespace: str = NAMESPACE,
    scoped: bool = False,
) -> ResourceQuota:
    """The admin sets a ResourceQuota in the namespace."""
    spec: dict[str, object] = {"hard": hard}
    if scoped:
        spec["scopes"] = ["Terminating"]
    raw = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
    existing = cluster.client.peek(ResourceQuota, name, namespace)
    if existing is not None:
        raw["metadata"] = existing.metadata.to_dict()
    return cluster.client.put(ResourceQuota.from_dict(raw))


def exceeded(cluster: Cluster, vm: str) -> list[str]:
    return [e.message for e in cluster.events_of(vm, "GPUQuotaExceeded")]


async def test_an_order_within_its_quota_is_bound(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "2"})
    cluster.node("node-a")
    cluster.vm("vm-a", 2, running=True)
    await cluster.settle()
    assert len(cluster.set_of("vm-a")) == 2


async def test_an_order_past_its_quota_waits_with_the_numbers_in_an_event(
    cluster: Cluster,
) -> None:
    quota(cluster, {REQUESTS: "3"})
    cluster.node("node-a")
    cluster.vm("vm-a", 2, running=True)
    await cluster.settle()
    cluster.vm("vm-b", 2, running=True)
    await cluster.settle()
    assert cluster.set_of("vm-b") == []
    [message] = exceeded(cluster, "vm-b")
    assert "holds 2 of the 3 × h100" in message and "asks for 2 more" in message
    assert f"ResourceQuota gpus, {REQUESTS}: 3" in message


async def test_gpus_reserved_for_a_stopped_vm_count_against_the_quota(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "2"})
    cluster.node("node-a")
    cluster.vm("stopped", 2)
    await cluster.settle()
    assert len(cluster.set_of("stopped")) == 2
    cluster.vm("vm-b", 1, running=True)
    await cluster.settle_after(minutes=5)
    assert cluster.set_of("vm-b") == []
    assert exceeded(cluster, "vm-b")


async def test_the_limits_spelling_and_the_lowest_of_several_quotas_hold(
    cluster: Cluster,
) -> None:
    quota(cluster, {REQUESTS: "4"}, name="big")
    quota(cluster, {LIMITS: "1"}, name="small")
    cluster.node("node-a")
    cluster.vm("vm-a", 2, running=True)
    await cluster.settle()
    assert cluster.set_of("vm-a") == []
    assert f"ResourceQuota small, {LIMITS}: 1" in exceeded(cluster, "vm-a")[0]


async def test_a_start_past_the_quota_is_answered_failed_with_the_numbers(
    cluster: Cluster,
) -> None:
    quota(cluster, {REQUESTS: "1"})
    cluster.node("node-a")
    cluster.vm("vm-a", 1, running=True)
    await cluster.settle()
    cluster.vm("vm-b", 1)
    cluster.config = cluster.binder.config
    cluster.request("vm-b", 1)
    await cluster.answer_requests()
    answer = cluster.answer("vm-b-bind")
    assert answer.status.phase == RequestPhase.FAILED
    assert "holds 1 of the 1 × h100" in answer.status.message
    assert "asks for 1 more" in answer.status.message
    assert exceeded(cluster, "vm-b")


async def test_two_starts_racing_for_the_last_unit_one_wins(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "1"})
    cluster.node("node-a")
    # Stopped VMs holding nothing (their reservation ran out): both start at once.
    cluster.gpu_class(release_after="1m")
    for vm in ("vm-a", "vm-b"):
        cluster.vm(vm, 1)
    await cluster.settle_after(minutes=2)
    assert cluster.set_of("vm-a") == cluster.set_of("vm-b") == []
    cluster.request("vm-a", 1)
    cluster.request("vm-b", 1)
    await cluster.answer_requests()
    phases = sorted(cluster.answer(f"{vm}-bind").status.phase for vm in ("vm-a", "vm-b"))
    assert phases == [RequestPhase.BOUND, RequestPhase.FAILED]


async def test_a_lowered_quota_disturbs_nothing_bound_or_running(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "4"})
    cluster.node("node-a")
    cluster.vm("running", 2, running=True)
    cluster.vm("stopped", 2)
    await cluster.settle()
    cluster.start("running")
    await cluster.settle()
    held = {vm: cluster.set_of(vm) for vm in ("running", "stopped")}
    quota(cluster, {REQUESTS: "1"})
    await cluster.settle_after(hours=2)
    assert {vm: cluster.set_of(vm) for vm in held} == held
    cluster.vm("new", 1, running=True)
    await cluster.settle()
    assert cluster.set_of("new") == []
    assert "holds 4 of the 1 × h100" in exceeded(cluster, "new")[0]


async def test_a_raised_quota_binds_the_order_that_waited(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "0"})
    cluster.node("node-a")
    cluster.vm("vm-a", 2, running=True)
    await cluster.settle()
    assert cluster.set_of("vm-a") == []
    quota(cluster, {REQUESTS: "2"})
    await cluster.settle()
    assert len(cluster.set_of("vm-a")) == 2


async def test_a_gpu_given_up_in_the_namespace_lets_the_order_that_waited_in(
    cluster: Cluster,
) -> None:
    quota(cluster, {REQUESTS: "2"})
    cluster.node("node-a")
    cluster.vm("vm-a", 2)
    await cluster.settle()
    cluster.vm("vm-b", 2, running=True)
    await cluster.settle()
    assert cluster.set_of("vm-b") == []
    await cluster.delete_vm("vm-a")
    await cluster.settle()
    assert len(cluster.set_of("vm-b")) == 2


async def test_a_quota_in_another_namespace_or_on_another_resource_limits_nothing(
    cluster: Cluster,
) -> None:
    quota(cluster, {REQUESTS: "0"}, namespace="elsewhere")
    quota(cluster, {"requests.nvidia.com/gpu": "0", "requests.cpu": "1"}, name="other")
    cluster.node("node-a")
    cluster.vm("vm-a", 2, running=True)
    await cluster.settle()
    assert len(cluster.set_of("vm-a")) == 2


async def test_a_scoped_quota_is_not_gpu_binders_to_enforce(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "0"}, scoped=True)
    cluster.node("node-a")
    cluster.vm("vm-a", 1, running=True)
    await cluster.settle()
    assert len(cluster.set_of("vm-a")) == 1


@pytest.mark.parametrize(
    ("value", "allowed", "why"),
    [
        ("1500m", 1, "is not a whole number of GPUs; enforced as 1"),
        ("eight", 0, "is not a quantity"),
        ("-2", 0, "is negative"),
    ],
)
async def test_a_malformed_quota_is_reported_on_the_quota_and_the_class(
    cluster: Cluster, value: str, allowed: int, why: str
) -> None:
    q = quota(cluster, {REQUESTS: value})
    cluster.node("node-a")
    cluster.vm("vm-a", 2, running=True)
    cluster.vm("vm-b", 1, running=True)
    await cluster.settle()
    assert sum(len(cluster.set_of(vm)) for vm in ("vm-a", "vm-b")) == allowed
    [note] = cluster.events_of("gpus", "GPUQuotaMalformed")
    assert (note.kind, note.namespace, note.uid) == ("ResourceQuota", NAMESPACE, q.metadata.uid)
    assert why in note.message and REQUESTS in note.message
    [cond] = [c for c in cluster.gpu_class_status().conditions if c.type == "QuotasValid"]
    assert (cond.status, cond.reason) == ("False", "MalformedQuota")
    assert f"{NAMESPACE}/gpus" in cond.message and why in cond.message


async def test_a_class_with_well_formed_quotas_says_so(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "8"})
    cluster.node("node-a")
    await cluster.settle()
    [cond] = [c for c in cluster.gpu_class_status().conditions if c.type == "QuotasValid"]
    assert cond.status == "True"


async def test_an_order_accepting_another_class_takes_it_when_its_own_is_past_quota(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID)
    quota(cluster, {REQUESTS: "0"})
    cluster.node("node-a")
    cluster.node("node-b", class_name=A100)
    cluster.vm("vm-a", 2, running=True, annotations={"gpu.cozystack.io/classes": "h100,a100"})
    await cluster.settle()
    assert cluster.node_of("vm-a") == "node-b"


async def test_a_lost_gpu_is_replaced_at_the_quota(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "2"})
    names = cluster.node("node-a")
    cluster.vm("vm-a", 2)
    await cluster.settle()
    [lost, kept] = cluster.set_of("vm-a")
    cluster.set_health(lost, False, "fell off the bus")
    await cluster.settle()
    await cluster.settle_after(minutes=6)
    assert kept in cluster.set_of("vm-a") and lost not in cluster.set_of("vm-a")
    assert len(cluster.set_of("vm-a")) == 2
    assert set(cluster.set_of("vm-a")) <= set(names)


async def test_no_room_is_made_for_an_order_past_its_quota(cluster: Cluster) -> None:
    quota(cluster, {REQUESTS: "2"})
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    cluster.vm("stopped-a", 2)
    await cluster.settle()
    cluster.vm("big", 4, running=True)
    await cluster.settle()
    assert cluster.set_of("big") == []
    assert cluster.events_of("big", "GPUMadeRoom") == []
    assert not any(e.reason == "GPUMove" for e in cluster.events)


async def test_the_quota_metric_says_used_and_hard_per_namespace_and_class(
    cluster: Cluster,
) -> None:
    quota(cluster, {REQUESTS: "3"})
    cluster.node("node-a")
    cluster.vm("vm-a", 2)
    await cluster.settle()
    registry = cluster.binder.metrics.registry
    labels = {"namespace": NAMESPACE, "class_name": H100}
    assert registry.get_sample_value("gpu_binder_quota_gpus", {**labels, "kind": "used"}) == 2
    assert registry.get_sample_value("gpu_binder_quota_gpus", {**labels, "kind": "hard"}) == 3
