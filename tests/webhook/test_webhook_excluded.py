"""Slot resources are nobody's to name in any namespace: an excluded namespace is spared
the pinning, never the refusal of another set's slots."""

from __future__ import annotations

from gpu_binder.api.slots import device_slot

from .webhook_cluster import NS, Cluster, review, vmi_of


async def test_a_vmi_in_an_excluded_namespace_naming_another_sets_slot_is_denied(
    cluster: Cluster,
) -> None:
    victim = cluster.vm("victim", {"h100": 1})
    theirs = cluster.gpu("node-a", 3, vm=victim)
    thief = cluster.vm("thief", {})
    gpus = [{"name": "g", "deviceName": device_slot(theirs)}]
    admitter = cluster.admitter(excluded_namespaces=(NS,))
    response = await admitter.admit(review(vmi_of(thief, domain={"devices": {"gpus": gpus}})))
    assert response["response"]["allowed"] is False
    assert device_slot(theirs) in response["response"]["status"]["message"]
    assert await cluster.requests_left() == []


async def test_a_vmi_in_an_excluded_namespace_naming_a_slot_no_set_holds_is_denied(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {})
    gpus = [{"name": "g", "deviceName": "gpu.cozystack.io/10de-2330-s7"}]
    admitter = cluster.admitter(excluded_namespaces=(NS,))
    response = await admitter.admit(review(vmi_of(vm, domain={"devices": {"gpus": gpus}})))
    assert response["response"]["allowed"] is False


async def test_a_vmi_in_an_excluded_namespace_asking_a_slot_in_its_limits_is_denied(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {})
    slot = "gpu.cozystack.io/10de-2330-s3"
    vmi = vmi_of(vm, domain={"devices": {}, "resources": {"limits": {slot: "1"}}})
    admitter = cluster.admitter(excluded_namespaces=(NS,))
    response = await admitter.admit(review(vmi))
    assert response["response"]["allowed"] is False
    assert slot in response["response"]["status"]["message"]


async def test_a_vmi_in_an_excluded_namespace_naming_its_own_sets_slots_passes_untouched(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    mine = cluster.gpu("node-b", 3, vm=vm)
    gpus = [{"name": "g", "deviceName": device_slot(mine)}]
    admitter = cluster.admitter(excluded_namespaces=(NS,))
    response = await admitter.admit(review(vmi_of(vm, domain={"devices": {"gpus": gpus}})))
    assert response["response"] == {"uid": "review-1", "allowed": True}
