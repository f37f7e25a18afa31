"""Orders are their objects' uids: a VMI never takes a set that is another object's."""

from __future__ import annotations

import pytest

from gpu_binder.api.types import GPUDevice
from gpu_binder.webhook.decision import NeedsRequest

from .webhook_cluster import Cluster, review, vmi_of


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


@pytest.mark.parametrize(
    ("field", "value"),
    [("uid", ""), ("name", ""), ("kind", ""), ("apiVersion", ""), ("apiVersion", "kubevirt.io/")],
)
async def test_a_vmi_whose_owner_the_api_server_would_refuse_is_denied_and_asks_nothing(
    cluster: Cluster, field: str, value: str
) -> None:
    """Mutating webhooks run before the API server validates ownerReferences: admitted, the
    VMI would be refused (422) after its set was bound, for an order that never comes."""
    vm = cluster.vm("vm", {"h100": 1})
    cluster.gpu("node-a", 3)
    vmi = vmi_of(vm)
    vmi["metadata"]["ownerReferences"][0][field] = value
    response = await cluster.admitter().admit(review(vmi))
    assert response["response"]["allowed"] is False
    message = response["response"]["status"]["message"]
    assert f"metadata.ownerReferences[0].{field} must not be empty" in message
    assert await cluster.requests_left() == []


async def test_a_vmi_with_two_controller_owners_is_denied_and_asks_nothing(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm", {"h100": 1})
    cluster.gpu("node-a", 3)
    vmi = vmi_of(vm)
    owner = vmi["metadata"]["ownerReferences"][0]
    vmi["metadata"]["ownerReferences"].append({**owner, "name": "other", "uid": "u-2"})
    response = await cluster.admitter().admit(review(vmi))
    assert response["response"]["allowed"] is False
    assert (
        "only one ownerReference may have controller: true"
        in (response["response"]["status"]["message"])
    )
    assert await cluster.requests_left() == []
