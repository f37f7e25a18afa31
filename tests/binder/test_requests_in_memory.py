"""Bind requests the leader's own webhook hands over in memory (World.asked): answered by
the requests step as the objects are, told to the webhook (Reconciler.on_answer), written
nowhere."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    BindReason,
    ClassCount,
    GPUBindRequest,
    GPUBindRequestSpec,
    NameRef,
    RequestPhase,
    VMRef,
)
from gpu_binder.binder.config import Config
from gpu_binder.binder.reconciler import NotLeader

from .cluster import H100, NAMESPACE, Cluster


def ask(cluster: Cluster, vm: str, count: int) -> GPUBindRequest:
    """The request as the webhook hands it over (webhook.bindrequest.in_memory)."""
    vm_obj = cluster.client.peek(VirtualMachine, vm, NAMESPACE)
    name = f"in-memory:{vm}-bind"
    asked = GPUBindRequest(
        metadata=ObjectMeta(name=name, namespace=NAMESPACE, creation_timestamp=cluster.clock.now),
        spec=GPUBindRequestSpec(
            vm=VMRef(name=vm, uid=vm_obj.metadata.uid if vm_obj else ""),
            vmi=NameRef(name=vm),
            requests=(ClassCount(class_name=H100, count=count),),
        ),
    )
    cluster.world.asked[f"{NAMESPACE}/{name}"] = asked
    return asked


def telling(cluster: Cluster) -> list[GPUBindRequest]:
    told: list[GPUBindRequest] = []
    cluster.binder.on_answer = told.append
    return told


async def told_failed(cluster: Cluster, why: str) -> None:
    """The requests answered: the one told is Failed saying why, and nothing is bound."""
    told = telling(cluster)
    await cluster.answer_requests()
    [answer] = told
    assert answer.status.phase == RequestPhase.FAILED
    assert why in answer.status.message
    assert cluster.set_of("vm") == []


async def test_a_request_in_memory_is_told_bound_with_its_node_and_devices_and_written_nowhere(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    ask(cluster, "vm", 2)
    told = telling(cluster)
    await cluster.answer_requests()
    [answer] = told
    assert answer.status.phase == RequestPhase.BOUND
    assert answer.status.node_name == "node-a"
    assert list(answer.status.devices) == cluster.set_of("vm")
    for name in answer.status.devices:
        binding = cluster.device(name).status.binding
        assert binding is not None and binding.reason == BindReason.REQUEST
    assert cluster.client.objects(GPUBindRequest) == []
    assert cluster.world.asked == {}


async def test_a_request_in_memory_bound_leaves_the_vm_an_event_saying_why(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    ask(cluster, "vm", 1)
    await cluster.answer_requests()
    [event, *_] = cluster.events_of("vm", "GPURequest")
    assert "node-a" in event.message


async def test_a_request_in_memory_that_does_not_fit_is_told_failed_and_the_vm_says_why(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    await cluster.settle()
    cluster.vm("vm", 4)
    ask(cluster, "vm", 4)
    told = telling(cluster)
    await cluster.answer_requests()
    [answer] = told
    assert answer.status.phase == RequestPhase.FAILED
    assert answer.status.message == "4 × h100 requested; the largest free set is 2 on node-a"
    [refused] = cluster.events_of("vm", "GPURefused")
    assert refused.type == "Warning" and refused.message == answer.status.message
    assert cluster.world.asked == {}


async def test_a_request_in_memory_for_a_replaced_vm_is_told_failed_by_uid(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    asked = ask(cluster, "vm", 1)
    spec = asked.spec.model_copy(update={"vm": asked.spec.vm.model_copy(update={"uid": "old"})})
    cluster.world.asked[f"{NAMESPACE}/{asked.metadata.name}"] = asked.model_copy(
        update={"spec": spec}
    )
    await told_failed(cluster, "replaced by a newer one")


async def test_requests_in_memory_and_objects_wait_in_one_line_oldest_first() -> None:
    cluster = Cluster(config=Config(requests_per_pass=1))
    cluster.gpu_class()
    cluster.node("node-a", 8)
    await cluster.settle()
    cluster.vm("vm-a", 1)
    ask(cluster, "vm-a", 1)
    cluster.clock.advance(seconds=1)
    cluster.vm("vm-b", 1)
    req = cluster.request("vm-b", 1)
    meta = req.metadata.model_copy(update={"creation_timestamp": cluster.clock.now})
    cluster.client.put(req.model_copy(update={"metadata": meta}))
    told = telling(cluster)
    first = await cluster.answer_requests()
    assert [r.spec.vm.name for r in told] == ["vm-a"]
    assert cluster.answer("vm-b-bind").status.phase == RequestPhase.PENDING
    assert first.requeue_after == timedelta(0)
    await cluster.answer_requests()
    assert cluster.answer("vm-b-bind").status.phase == RequestPhase.BOUND


async def test_the_requests_key_runs_again_at_once_while_requests_in_memory_wait() -> None:
    cluster = Cluster(config=Config(requests_per_pass=1))
    cluster.gpu_class()
    cluster.node("node-a", 8)
    await cluster.settle()
    for vm in ("vm-a", "vm-b"):
        cluster.vm(vm, 1)
        ask(cluster, vm, 1)
    first = await cluster.answer_requests()
    assert first.requeue_after == timedelta(0)
    assert len(cluster.world.asked) == 1
    second = await cluster.answer_requests()
    assert second.requeue_after is None
    assert cluster.world.asked == {}


async def test_a_request_in_memory_is_never_told_once_the_lease_is_lost(
    cluster: Cluster,
) -> None:
    """The bind written under the lease stays the VM's; the answer, after it, is not told:
    the webhook is refused (kube.manager abandons it), never admitted by a lapsed leader."""
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    ask(cluster, "vm", 1)
    told = telling(cluster)
    leading = [True]
    cluster.binder.is_leader = lambda: leading[0]
    real_update_status = cluster.client.update_status

    async def update_status(obj: Any) -> Any:
        made = await real_update_status(obj)
        leading[0] = False  # the renewal overdue as the bind came back
        return made

    cluster.client.update_status = update_status  # type: ignore[method-assign]
    with pytest.raises(NotLeader):
        await cluster.answer_requests()
    assert told == []
    assert len(cluster.world.asked) == 1
    assert len(cluster.set_of("vm")) == 1


async def test_a_request_in_memory_for_a_vm_deleted_meanwhile_binds_nothing(
    cluster: Cluster,
) -> None:
    """Its object would have gone with the VM (owned by it); in memory it is refused, or
    the deleted VM's tenant would be billed reserved seconds until the set was released."""
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    ask(cluster, "vm", 1)
    await cluster.delete_vm("vm")
    await told_failed(cluster, "deleted")


async def test_a_request_in_memory_for_a_vm_being_deleted_binds_nothing(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    raw = cluster.vm("vm", 1).to_dict()
    raw["metadata"]["deletionTimestamp"] = cluster.clock.now.isoformat()
    raw["metadata"]["finalizers"] = ["kubevirt.io/virtualMachineControllerFinalize"]
    cluster.client.put(VirtualMachine.from_dict(raw))
    ask(cluster, "vm", 1)
    await told_failed(cluster, "deleted")
