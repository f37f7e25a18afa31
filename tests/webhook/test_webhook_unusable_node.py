"""A complete set on a node its VMI cannot start on is not pinned there (DESIGN §3 moves,
§4): the webhook asks the binder, whose request path moves the set first.

Pinned to such a node the VMI would stay unschedulable, and as a live VMI it would hold
its set in place until the tenant stopped it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpu_binder.api.kubevirt import Node, VirtualMachineInstance
from gpu_binder.api.types import NODE_ANNOTATION
from gpu_binder.binder.reconciler import REQUESTS_KEY
from gpu_binder.sim.builders import node_object, vmi_for
from gpu_binder.webhook.decision import NeedsRequest, Respond

from .webhook_cluster import T0, Cluster, patched, review, vmi_of

H100_SLOT = "gpu.cozystack.io/10de-2330-s{}"
KEY = "tenant-a/vm1"


def device_names(vmi: dict[str, Any]) -> list[str]:
    return [g["deviceName"] for g in vmi["spec"]["domain"]["devices"]["gpus"]]


def pinned_node(vmi: dict[str, Any]) -> str:
    affinity = vmi["spec"]["affinity"]["nodeAffinity"]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = required["nodeSelectorTerms"]
    (field,) = term["matchFields"]
    (node,) = field["values"]
    return str(node)


def cordon(cluster: Cluster, node: str) -> None:
    cluster.client.put(node_object(node, T0, unschedulable=True))


def degrade(cluster: Cluster, node: str) -> None:
    """The GPUDegraded condition the binder sets on a node whose plugin serves too few."""
    raw = node_object(node, T0).raw
    raw["status"]["conditions"].append(
        {"type": "GPUDegraded", "status": "True", "reason": "PluginShortfall"}
    )
    cluster.client.put(Node.from_dict(raw))


async def admit_with_binder(cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    """Admit, while the binder answers the bind request the admission creates, if any."""

    async def binder_answers() -> None:
        while not cluster.world.pending_requests:
            await asyncio.sleep(0.001)
        await cluster.reconciler().reconcile(REQUESTS_KEY)

    binder = asyncio.create_task(binder_answers())
    try:
        return await asyncio.wait_for(cluster.admitter().admit(body), 2)
    finally:
        binder.cancel()


async def test_a_set_on_a_cordoned_node_is_moved_before_its_vmi_is_admitted(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0, vm=vm)
    cluster.gpu("node-b", 3)
    cordon(cluster, "node-a")
    vmi = vmi_of(vm)
    out = patched(await admit_with_binder(cluster, review(vmi)), vmi)
    assert pinned_node(out) == "node-b"
    assert device_names(out) == [H100_SLOT.format(3)]
    assert {d.spec.node_name for d in cluster.world.devices.set_of(KEY)} == {"node-b"}
    assert await cluster.requests_left() == []


async def test_a_set_on_a_cordoned_node_with_no_room_elsewhere_is_denied_with_the_binders_refusal(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0, vm=vm)
    cordon(cluster, "node-a")
    response = await admit_with_binder(cluster, review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    message = response["response"]["status"]["message"]
    assert message.startswith("node node-a is cordoned, but the set cannot move: ")
    assert {d.spec.node_name for d in cluster.world.devices.set_of(KEY)} == {"node-a"}
    assert await cluster.requests_left() == []


async def test_a_set_is_moved_to_the_node_its_vms_annotation_names_before_its_vmi_is_admitted(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1}, annotations={NODE_ANNOTATION: "node-c"})
    cluster.gpu("node-a", 0, vm=vm)
    cluster.gpu("node-b", 1)
    cluster.gpu("node-c", 2)
    vmi = vmi_of(vm)
    out = patched(await admit_with_binder(cluster, review(vmi)), vmi)
    assert pinned_node(out) == "node-c"
    assert device_names(out) == [H100_SLOT.format(2)]
    assert {d.spec.node_name for d in cluster.world.devices.set_of(KEY)} == {"node-c"}


@pytest.mark.parametrize(
    "unusable",
    ["cordoned", "not-ready", "gone", "degraded", "device-unschedulable", "annotation"],
)
async def test_every_reason_the_binder_moves_a_set_for_sends_its_vmi_to_the_binder(
    cluster: Cluster, unusable: str
) -> None:
    annotations = {NODE_ANNOTATION: "node-b"} if unusable == "annotation" else None
    vm = cluster.vm("vm1", {"h100": 1}, annotations=annotations)
    d = cluster.gpu("node-a", 0, vm=vm)
    if unusable == "cordoned":
        cordon(cluster, "node-a")
    elif unusable == "not-ready":
        cluster.client.put(node_object("node-a", T0, ready=False))
    elif unusable == "gone":
        await cluster.client.delete(Node, "node-a")
    elif unusable == "degraded":
        degrade(cluster, "node-a")
    elif unusable == "device-unschedulable":
        spec = d.spec.model_copy(update={"unschedulable": True})
        cluster.client.put(d.model_copy(update={"spec": spec}))
    decision = cluster.admitter().decide(review(vmi_of(vm)))
    assert isinstance(decision, NeedsRequest)
    assert [(r.class_name, r.count) for r in decision.request.spec.requests] == [("h100", 1)]


async def test_a_set_on_a_healthy_node_is_pinned_at_once_without_a_bind_request(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1}, annotations={NODE_ANNOTATION: "node-a"})
    cluster.gpu("node-a", 4, vm=vm)
    cordon(cluster, "node-b")  # another node's state is no reason to move
    writes = cluster.client.writes
    vmi = vmi_of(vm)
    decision = cluster.admitter().decide(review(vmi))
    assert isinstance(decision, Respond)
    out = patched(decision.response, vmi)
    assert pinned_node(out) == "node-a"
    assert device_names(out) == [H100_SLOT.format(4)]
    assert cluster.client.writes == writes
    assert await cluster.requests_left() == []


async def test_a_set_another_live_vmi_holds_is_pinned_where_it_is(cluster: Cluster) -> None:
    """The binder moves no set a live VMI holds, so asking it would only cost time."""
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0, vm=vm)
    cordon(cluster, "node-a")
    older = vmi_for(vm, status={"phase": "Running"})
    older["metadata"]["name"] = "vm1-old"
    cluster.client.put(VirtualMachineInstance.from_dict(older))
    decision = cluster.admitter().decide(review(vmi_of(vm)))
    assert isinstance(decision, Respond)
    assert pinned_node(patched(decision.response, vmi_of(vm))) == "node-a"


async def test_a_dry_run_of_a_set_that_must_move_is_not_pinned_and_warns(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0, vm=vm)
    cordon(cluster, "node-a")
    writes = cluster.client.writes
    response = await cluster.admitter().admit(review(vmi_of(vm), dry_run=True))
    assert response["response"]["allowed"] is True
    assert "patch" not in response["response"]
    (warning,) = response["response"]["warnings"]
    assert warning.startswith("dry run:")
    assert "node node-a is cordoned" in warning
    assert cluster.client.writes == writes
    assert await cluster.requests_left() == []


async def test_a_disabled_binder_still_pins_a_set_that_should_move(cluster: Cluster) -> None:
    """Disabled, the binder moves nothing: the VMI runs once the node is usable again."""
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0, vm=vm)
    cordon(cluster, "node-a")
    vmi = vmi_of(vm)
    decision = cluster.admitter(enabled=False).decide(review(vmi))
    assert isinstance(decision, Respond)
    assert pinned_node(patched(decision.response, vmi)) == "node-a"
