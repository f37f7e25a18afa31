"""Orders are their objects' uids: a VMI never takes a set that is another object's."""

from __future__ import annotations

from webhook_cluster import Cluster, review, vmi_of

from gpu_binder.api.types import GPUDevice
from gpu_binder.webhook.decision import NeedsRequest


async def test_a_standalone_vmi_named_like_a_vm_is_denied_and_takes_nothing(
    cluster: Cluster,
) -> None:
    """KubeVirt's VM controller would claim such a VMI for the VM (it adopts an orphan VMI of
    its name): the VM's stopped set is not the VMI's, nor is the VMI an order of its own."""
    vm = cluster.vm("shared", {"h100": 1})
    cluster.gpu("node-a", 3, vm=vm)
    vmi = vmi_of(vm)
    del vmi["metadata"]["ownerReferences"]
    response = await cluster.admitter().admit(review(vmi))
    assert response["response"]["allowed"] is False
    assert "VirtualMachine shared" in response["response"]["status"]["message"]
    assert await cluster.requests_left() == []


async def test_a_standalone_vmi_is_not_pinned_to_a_set_bound_under_another_uid(
    cluster: Cluster,
) -> None:
    """A standalone VMI has no uid at admission; a set stamped with one is an earlier
    VMI's of that name."""
    vm = cluster.vm("solo", {"h100": 1})
    d = cluster.gpu("node-a", 3, vm=vm)
    status = d.status.model_dump(by_alias=True)
    status["binding"]["vm"]["uid"] = "uid-of-an-earlier-solo"
    cluster.client.put(d.model_copy(update={"status": type(d.status).model_validate(status)}))
    await cluster.client.delete(type(vm), "solo", vm.metadata.namespace)
    vmi = vmi_of(vm)
    del vmi["metadata"]["ownerReferences"]
    decision = cluster.admitter().decide(review(vmi))
    assert isinstance(decision, NeedsRequest), "it asks for a set of its own"
    assert isinstance(cluster.client.peek(GPUDevice, d.metadata.name), GPUDevice)
