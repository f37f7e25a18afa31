"""Bind requests: the webhook waits for an answer, Bound with the set or Failed with why."""

from __future__ import annotations

import pytest

from gpu_binder.api.types import BindReason, GPUBindRequest, Phase, RequestPhase
from gpu_binder.binder.steps import requests

from .cluster import NAMESPACE, Cluster


async def test_a_bind_request_is_answered_bound_with_its_node_and_devices(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    cluster.request("vm", 2)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert answer.phase == RequestPhase.BOUND
    assert answer.node_name == "node-a"
    assert list(answer.devices) == cluster.set_of("vm")
    assert answer.answered_at == cluster.clock.now
    for name in answer.devices:
        binding = cluster.device(name).status.binding
        assert binding is not None and binding.reason == BindReason.REQUEST
    [event, *_] = cluster.events_of("vm", "GPURequest")
    assert "node-a" in event.message


async def test_a_request_for_a_complete_set_is_answered_with_it(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("vm", 2)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.request("vm", 2)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert (answer.phase, list(answer.devices)) == (RequestPhase.BOUND, devices)


async def test_a_request_completes_a_partial_set_on_its_node(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 8)
    cluster.vm("vm", 2)
    await cluster.settle()
    home = cluster.node_of("vm")
    cluster.vm("vm", 3)
    cluster.request("vm", 3)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert answer.phase == RequestPhase.BOUND and answer.node_name == home
    assert len(cluster.set_of("vm")) == 3 and cluster.node_of("vm") == home


async def test_a_request_that_does_not_fit_fails_naming_the_largest_free_set(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-c", 3)
    await cluster.settle()
    cluster.vm("vm", 4)
    cluster.request("vm", 4)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert answer.phase == RequestPhase.FAILED
    assert answer.message == "4 × h100 requested; the largest free set is 3 on node-c"
    assert cluster.set_of("vm") == []
    [refused] = cluster.events_of("vm", "GPURefused")
    assert refused.type == "Warning" and refused.message == answer.message


async def test_a_request_for_an_unknown_class_fails_saying_so(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 1)
    cluster.request("vm", 1, class_name="b200")
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert answer.phase == RequestPhase.FAILED and "unknown GPU class b200" in answer.message


async def test_the_requests_pass_only_answers_requests(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("stopped", 2)
    await cluster.settle()
    cluster.cordon(cluster.node_of("stopped"))
    cluster.vm("other", 1)
    cluster.vm("vm", 1)
    cluster.request("vm", 1)
    before = cluster.set_of("stopped")
    result = await cluster.answer_requests()
    assert cluster.answer("vm-bind").status.phase == RequestPhase.BOUND
    assert cluster.set_of("stopped") == before, "no moves"
    assert cluster.set_of("other") == [], "no orders"
    assert result.requeue_after is None, "no resync for the requests key"
    assert cluster.gpu_class_status().bound == 2, "no class status"


async def test_an_answered_request_is_not_answered_again(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    cluster.request("vm", 1)
    await cluster.answer_requests()
    answered = cluster.answer("vm-bind")
    await cluster.answer_requests()
    await cluster.settle()
    assert cluster.answer("vm-bind").metadata.resource_version == (
        answered.metadata.resource_version
    )
    assert all(cluster.phase(n) == Phase.BOUND for n in cluster.set_of("vm"))


async def test_a_request_moves_a_set_whose_node_was_just_cordoned(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("vm", 2)
    await cluster.settle()
    assert cluster.node_of("vm") == "node-a"
    cluster.cordon("node-a")
    cluster.request("vm", 2)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert (answer.phase, answer.node_name) == (RequestPhase.BOUND, "node-b")
    assert cluster.node_of("vm") == "node-b"


async def test_a_request_answered_after_its_retried_vmi_was_admitted_moves_nothing(
    cluster: Cluster,
) -> None:
    # The webhook timed out on the request and denied the VMI; KubeVirt created it again
    # and it was pinned to the set. The first request, still pending, is answered late:
    # the live VMI of that name holds the set where it was pinned.
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("vm", 2)
    await cluster.settle()
    pinned = cluster.set_of("vm")
    cluster.start("vm", phase="Pending", node="")
    cluster.cordon("node-a")
    cluster.request("vm", 2)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert (answer.node_name, list(answer.devices)) == ("node-a", pinned)
    assert cluster.set_of("vm") == pinned


async def test_a_request_for_a_set_stuck_on_a_cordoned_node_fails_saying_why(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-b", 1)
    cluster.vm("vm", 2)
    await cluster.settle()
    cluster.cordon("node-a")
    cluster.request("vm", 2)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    assert answer.phase == RequestPhase.FAILED
    assert answer.message == (
        "node node-a is cordoned, but the set cannot move: "
        "2 × h100 requested; the largest free set is 1 on node-b"
    )


async def test_a_request_its_webhook_deleted_does_not_hold_up_the_next_answer(
    cluster: Cluster,
) -> None:
    # The webhook gave up (bind timeout) and deleted its request before the binder's watch
    # said so: writing that answer finds nothing, and the other answers are written.
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("gone", 1)
    cluster.vm("vm", 1)
    cluster.request("gone", 1)
    cluster.request("vm", 1)
    cluster.lag()
    await cluster.client.delete(GPUBindRequest, "gone-bind", NAMESPACE)
    result = await cluster.answer_requests()
    cluster.catch_up()
    assert not result.aborted
    answer = cluster.answer("vm-bind").status
    assert answer.phase == RequestPhase.BOUND and list(answer.devices) == cluster.set_of("vm")
    assert len(cluster.set_of("gone")) == 1  # bound for its VM's next start all the same


def left(cluster: Cluster, name: str) -> bool:
    return cluster.client.peek(GPUBindRequest, name, NAMESPACE) is not None


async def test_an_answered_request_left_behind_is_deleted_after_four_bind_timeouts(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("solo", 1)  # a standalone VMI's: no owner to be collected with
    await cluster.answer_requests()
    assert cluster.answer("solo-bind").status.phase == RequestPhase.BOUND
    await cluster.settle_after(seconds=19)
    assert left(cluster, "solo-bind"), "its webhook may still read it"
    await cluster.settle_after(seconds=1)
    assert not left(cluster, "solo-bind")


async def test_a_failed_request_left_behind_is_deleted_too(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    await cluster.settle()
    cluster.vm("vm", 4)
    cluster.request("vm", 4)
    await cluster.answer_requests()
    assert cluster.answer("vm-bind").status.phase == RequestPhase.FAILED
    await cluster.settle_after(seconds=20)
    assert not left(cluster, "vm-bind")


async def test_a_request_answered_before_a_restart_and_left_is_deleted_after_it(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    cluster.request("vm", 1)
    await cluster.answer_requests()
    cluster.restart()
    await cluster.settle()
    assert left(cluster, "vm-bind")
    await cluster.settle_after(seconds=20)
    assert not left(cluster, "vm-bind")


async def test_requests_left_behind_are_deleted_a_bounded_number_per_pass(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(requests, "DELETIONS_PER_PASS", 2, raising=False)
    cluster.node("node-a")
    await cluster.settle()
    for i in range(3):
        cluster.vm(f"vm{i}", 1)
        cluster.request(f"vm{i}", 1)
    await cluster.answer_requests()
    cluster.clock.advance(seconds=20)
    await cluster.run()
    assert sum(left(cluster, f"vm{i}-bind") for i in range(3)) == 1
    await cluster.run()
    assert not any(left(cluster, f"vm{i}-bind") for i in range(3))


async def test_a_refusal_for_a_vm_that_never_came_is_forgotten_on_a_resync(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    await cluster.settle()
    cluster.request("ghost", 4)
    await cluster.answer_requests()
    assert cluster.events_of("ghost", "GPURefused")
    await cluster.settle_after(seconds=30)
    assert not [k for k in cluster.binder.memory.said if "tenant/ghost" in k]
