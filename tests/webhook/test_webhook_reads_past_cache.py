"""The VMI webhook pins to what the API server holds, not to what its world says: the
leader's world holds decisions staged but not written (a 409 un-stages them), another
replica's lags behind the leader's writes."""

from __future__ import annotations

from datetime import timedelta

from webhook_cluster import NS, T0, Cluster, review, vmi_of

from gpu_binder.api.types import Binding, BindReason, GPUBindRequest, ObjectRef, Phase, RequestPhase
from gpu_binder.webhook.decision import Respond


async def test_a_set_only_the_world_holds_goes_the_requests_way(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    free = cluster.gpu("node-b", 2)
    # The leader staged the bind: in its world, not (yet) in the API server.
    ref = ObjectRef(namespace=NS, name="vm1", uid=vm.metadata.uid)
    binding = Binding(vm=ref, bound_at=T0, reason=BindReason.ORDER)
    staged = free.model_copy(
        update={"status": free.status.model_copy(update={"binding": binding, "phase": Phase.BOUND})}
    )
    cluster.world.put_device(staged)
    admitter = cluster.admitter(bind_timeout=timedelta(milliseconds=50))
    # Without I/O (the embedded cluster, whose world is what was written) it is pinned...
    assert isinstance(admitter.decide(review(vmi_of(vm))), Respond)
    # ...through the API server it asks the binder, which answers after its writes.
    response = await admitter.admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    assert "no answer from gpu-binder" in response["response"]["status"]["message"]


async def test_an_answer_whose_gpus_were_released_since_is_denied(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-b", 2)
    admitter = cluster.admitter()
    body = review(vmi_of(vm))
    decided = admitter.decide(body)
    assert not isinstance(decided, Respond)
    answered = decided.request.model_copy(
        update={
            "status": decided.request.status.model_copy(
                update={"phase": RequestPhase.BOUND, "node_name": "node-b", "devices": (gpu.name,)}
            )
        }
    )
    assert isinstance(answered, GPUBindRequest)
    response = admitter.answer(body, answered)
    assert response["response"]["allowed"] is False
    assert (
        f"GPU {gpu.name} that gpu-binder answered with is no longer bound to {NS}/vm1"
        in (response["response"]["status"]["message"])
    )
