"""Quota at a VM's start: the webhook asks the binder by bind request, the binder's
requests pass (the single writer) holds the namespace to its ResourceQuota, and a start
past it is denied with the numbers."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_binder.api.quota import ResourceQuota
from gpu_binder.binder.reconciler import REQUESTS_KEY

from .webhook_cluster import H100, NS, Cluster, review, vmi_of


def quota(cluster: Cluster, gpus: int) -> None:
    raw = {
        "metadata": {"name": "gpus", "namespace": NS},
        "spec": {"hard": {f"requests.{H100}": str(gpus)}},
    }
    cluster.client.put(ResourceQuota.from_dict(raw))


async def answered(cluster: Cluster, *bodies: dict[str, Any]) -> list[dict[str, Any]]:
    """Admit the reviews at once; the binder answers their requests in one pass."""

    async def binder() -> None:
        while len(cluster.world.pending_requests) < len(bodies):
            await asyncio.sleep(0.001)
        await cluster.reconciler().reconcile(REQUESTS_KEY)

    task = asyncio.create_task(binder())
    responses = await asyncio.gather(*(cluster.admitter().admit(b) for b in bodies))
    await asyncio.wait_for(task, 1)
    return [r["response"] for r in responses]


async def test_a_start_past_the_quota_is_denied_with_used_hard_and_asked(cluster: Cluster) -> None:
    quota(cluster, 2)
    holder = cluster.vm("holder", {"h100": 2})
    cluster.gpu("node-a", 0, vm=holder)
    cluster.gpu("node-a", 1, vm=holder)
    cluster.gpu("node-b", 0)
    vm = cluster.vm("vm1", {"h100": 1})
    [response] = await answered(cluster, review(vmi_of(vm)))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("GPU quota exceeded: namespace tenant-a holds 2 of the 2 × h100")
    assert "asks for 1 more" in message


async def test_two_vms_racing_for_the_last_unit_one_is_admitted(cluster: Cluster) -> None:
    quota(cluster, 1)
    for slot in range(4):
        cluster.gpu("node-a", slot)
    vms = [cluster.vm(f"vm{i}", {"h100": 1}) for i in (1, 2)]
    bodies = [review(vmi_of(vm), uid=f"review-{vm.metadata.name}") for vm in vms]
    responses = await answered(cluster, *bodies)
    assert sorted(r["allowed"] for r in responses) == [False, True]
    [denied] = [r for r in responses if not r["allowed"]]
    assert "holds 1 of the 1 × h100" in denied["status"]["message"]


async def test_a_start_on_its_own_set_is_admitted_under_a_lowered_quota(cluster: Cluster) -> None:
    quota(cluster, 0)
    vm = cluster.vm("vm1", {"h100": 2})
    cluster.gpu("node-a", 0, vm=vm)
    cluster.gpu("node-a", 1, vm=vm)
    response = await cluster.admitter().admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is True
