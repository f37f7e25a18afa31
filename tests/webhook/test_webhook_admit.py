"""The webhook's decision (DESIGN §4): each test states one rule of admitting a VMI."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.slots import device_slot
from gpu_binder.api.types import USAGE_FINALIZER, GPUBindRequest, GPUDevice, RequestPhase
from gpu_binder.binder.reconciler import REQUESTS_KEY
from gpu_binder.sim.admission import outcome
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook.decision import Admitter, NeedsRequest, Respond
from gpu_binder.webhook.review import BadReview

from .webhook_cluster import H100, L40S, NS, Cluster, patched, review, vmi_of

H100_SLOT = "gpu.cozystack.io/10de-2330-s{}"
NODE = "metadata.name"


def device_names(vmi: dict[str, Any]) -> list[str]:
    return [g["deviceName"] for g in vmi["spec"]["domain"]["devices"]["gpus"]]


def node_terms(vmi: dict[str, Any]) -> list[dict[str, Any]]:
    required = vmi["spec"]["affinity"]["nodeAffinity"]
    terms: list[dict[str, Any]] = required["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return terms


def on(node: str) -> dict[str, Any]:
    return {"key": NODE, "operator": "In", "values": [node]}


def requests_in(cluster: Cluster) -> list[GPUBindRequest]:
    return cluster.client.objects(GPUBindRequest)


async def binder_answers(cluster: Cluster) -> None:
    """The binder's side: once a bind request appears, run the requests pass."""
    while not cluster.world.pending_requests:
        await asyncio.sleep(0.001)
    await cluster.reconciler().reconcile(REQUESTS_KEY)


async def admit_with_binder(cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    binder = asyncio.create_task(binder_answers(cluster))
    response = await cluster.admitter().admit(body)
    await asyncio.wait_for(binder, 1)
    return response


# --- passing untouched ---------------------------------------------------------------


async def test_a_vmi_without_gpus_passes_untouched(cluster: Cluster) -> None:
    vm = cluster.vm("plain", {})
    response = await cluster.admitter().admit(review(vmi_of(vm)))
    assert response["response"] == {"uid": "review-1", "allowed": True}
    assert cluster.client.writes == 0


async def test_a_vmi_with_devices_of_no_known_class_passes_untouched(cluster: Cluster) -> None:
    vm = cluster.vm("other", {})
    gpus = [{"name": "g", "deviceName": "example.com/SomeOtherGPU"}]
    vmi = vmi_of(vm, domain={"devices": {"gpus": gpus}})
    response = await cluster.admitter().admit(review(vmi))
    assert response["response"] == {"uid": "review-1", "allowed": True}


async def test_a_vmi_in_an_excluded_namespace_passes_untouched(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    admitter = cluster.admitter(excluded_namespaces=(NS,))
    response = await admitter.admit(review(vmi_of(vm)))
    assert response["response"] == {"uid": "review-1", "allowed": True}
    assert await cluster.requests_left() == []


async def test_an_update_passes_untouched(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    body = review(vmi_of(vm))
    body["request"]["operation"] = "UPDATE"
    response = await cluster.admitter().admit(body)
    assert response["response"] == {"uid": "review-1", "allowed": True}


# --- a complete set: patched at once ---------------------------------------------------


async def test_a_complete_set_is_patched_with_slot_resources_affinity_and_annotation(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 2})
    a = cluster.gpu("node-b", 5, vm=vm)
    b = cluster.gpu("node-b", 2, vm=vm)
    vmi = vmi_of(vm)
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    assert device_names(out) == [H100_SLOT.format(2), H100_SLOT.format(5)]
    assert node_terms(out) == [{"matchFields": [on("node-b")]}]
    assert out["metadata"]["annotations"]["gpu.cozystack.io/devices"] == ",".join(
        sorted([a.name, b.name])
    )
    assert await cluster.requests_left() == []


async def test_an_admitted_gpu_vmi_gets_the_usage_finalizer(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 0, vm=vm)
    vmi = vmi_of(vm)
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    assert out["metadata"]["finalizers"] == [USAGE_FINALIZER]


async def test_a_vmi_answered_through_a_request_gets_the_usage_finalizer(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 3)
    vmi = vmi_of(vm)
    out = patched(await admit_with_binder(cluster, review(vmi)), vmi)
    assert out["metadata"]["finalizers"] == [USAGE_FINALIZER]


async def test_a_vmi_without_gpus_gets_no_usage_finalizer(cluster: Cluster) -> None:
    vm = cluster.vm("plain", {})
    vmi = vmi_of(vm)
    out = outcome(vmi, await cluster.admitter().admit(review(vmi)))
    assert isinstance(out, dict) and "finalizers" not in out["metadata"]


async def test_affinity_is_anded_into_each_of_the_users_terms(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0, vm=vm)
    zone = {"key": "zone", "operator": "In", "values": ["z1"]}
    rack = {"key": "rack", "operator": "In", "values": ["r7"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [rack]}]}
    vmi = vmi_of(
        vm, affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    )
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    assert node_terms(out) == [
        {"matchExpressions": [zone], "matchFields": [on("node-a")]},
        {"matchExpressions": [rack], "matchFields": [on("node-a")]},
    ]


async def test_a_node_pinned_class_gets_only_affinity_and_annotation(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"l40s": 1})
    d = cluster.gpu("node-c", 1, cls="l40s", vm=vm)
    vmi = vmi_of(vm)
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    assert device_names(out) == [L40S]
    assert node_terms(out) == [{"matchFields": [on("node-c")]}]
    assert out["metadata"]["annotations"] == {"gpu.cozystack.io/devices": d.name}


async def test_host_device_entries_are_rewritten_too(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {})
    cluster.gpu("node-a", 4, vm=vm)
    vmi = vmi_of(vm, domain={"devices": {"hostDevices": [{"name": "h", "deviceName": H100}]}})
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    assert out["spec"]["domain"]["devices"]["hostDevices"] == [
        {"name": "h", "deviceName": H100_SLOT.format(4)}
    ]


async def test_a_lost_device_does_not_count_toward_the_set(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 2})
    cluster.gpu("node-a", 0, vm=vm)
    cluster.gpu("node-a", 1, vm=vm, lost=True)
    decision = cluster.admitter().decide(review(vmi_of(vm)))
    assert isinstance(decision, NeedsRequest)


async def test_a_set_bound_to_an_earlier_vm_of_the_same_name_is_not_used(
    cluster: Cluster,
) -> None:
    earlier = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0, vm=earlier)
    cluster.client.put(
        VirtualMachine.from_dict(
            {
                **earlier.raw,
                "metadata": {"name": "vm1", "namespace": NS, "uid": "uid-of-the-new-vm"},
            }
        )
    )
    vm = cluster.world.vms[f"{NS}/vm1"]
    decision = cluster.admitter().decide(review(vmi_of(vm)))
    assert isinstance(decision, NeedsRequest)


# --- an incomplete set: ask the binder and wait ----------------------------------------


async def test_an_incomplete_set_asks_for_a_request_owned_by_the_vm(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 2, "l40s": 1})
    decision = cluster.admitter().decide(review(vmi_of(vm)))
    assert isinstance(decision, NeedsRequest)
    req = decision.request
    assert req.metadata.namespace == NS
    assert req.metadata.name.startswith("vm1-")
    (owner,) = req.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "VirtualMachine",
        "vm1",
        vm.metadata.uid,
        False,
    )
    assert (req.spec.vm.name, req.spec.vm.uid, req.spec.vmi.name) == ("vm1", vm.metadata.uid, "vm1")
    assert [(r.class_name, r.count) for r in req.spec.requests] == [("h100", 2), ("l40s", 1)]


async def test_a_bound_answer_admits_the_vmi_with_the_bound_devices(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 2})
    cluster.gpu("node-b", 3)
    cluster.gpu("node-b", 5)
    vmi = vmi_of(vm)
    out = patched(await admit_with_binder(cluster, review(vmi)), vmi)
    assert device_names(out) == [H100_SLOT.format(3), H100_SLOT.format(5)]
    assert node_terms(out) == [{"matchFields": [on("node-b")]}]
    bound = sorted(d.name for d in cluster.world.devices.set_of(f"{NS}/vm1"))
    assert out["metadata"]["annotations"]["gpu.cozystack.io/devices"] == ",".join(bound)


async def test_the_request_is_deleted_after_the_answer(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0)
    response = await admit_with_binder(cluster, review(vmi_of(vm)))
    assert response["response"]["allowed"]
    assert await cluster.requests_left() == []


async def test_a_failed_answer_denies_with_the_binders_message(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 4})
    cluster.gpu("node-a", 0)
    cluster.gpu("node-c", 0)
    cluster.gpu("node-c", 1)
    response = await admit_with_binder(cluster, review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    assert response["response"]["status"]["message"] == (
        "4 × h100 requested; the largest free set is 2 on node-c"
    )
    assert await cluster.requests_left() == []


async def test_no_answer_within_the_bind_timeout_denies(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    admitter = cluster.admitter(bind_timeout=timedelta(milliseconds=50))
    response = await admitter.admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    assert response["response"]["status"]["message"] == (
        "no answer from gpu-binder within 0.05s; KubeVirt will retry"
    )
    # The VM's request stays for KubeVirt's retry of the start, which waits for its answer.
    [left] = await cluster.requests_left()
    assert left.status.phase == RequestPhase.PENDING
    assert left.spec.vm.uid == vm.metadata.uid


async def test_a_retry_after_a_timeout_waits_for_the_same_request(cluster: Cluster) -> None:
    """KubeVirt retries a refused start: the retry waits for the answer to the request the
    timed-out attempt left, creating none, and deletes it once answered."""
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 3)
    timed_out = await cluster.admitter(bind_timeout=timedelta(milliseconds=50)).admit(
        review(vmi_of(vm))
    )
    assert timed_out["response"]["allowed"] is False
    [first] = requests_in(cluster)
    created: list[GPUBindRequest] = []
    real_create = cluster.client.create

    async def create(obj: Any) -> Any:
        created.append(obj)
        return await real_create(obj)

    cluster.client.create = create  # type: ignore[method-assign]
    vmi = vmi_of(vm)
    out = patched(await admit_with_binder(cluster, review(vmi, uid="review-2")), vmi)
    assert device_names(out) == [H100_SLOT.format(3)]
    assert created == []
    assert first.metadata.name not in {r.metadata.name for r in requests_in(cluster)}


async def test_a_timed_out_standalone_vmis_request_is_deleted(cluster: Cluster) -> None:
    """A standalone VMI's name may be another object's by the retry: its request is not
    kept for one."""
    vmi = vmi_of(cluster.vm("vm1", {"h100": 1}))
    vmi["metadata"].pop("ownerReferences")
    vmi["metadata"]["name"] = "solo"
    admitter = cluster.admitter(bind_timeout=timedelta(milliseconds=50))
    response = await admitter.admit(review(vmi))
    assert response["response"]["status"]["message"].startswith("no answer from gpu-binder")
    assert await cluster.requests_left() == []


async def test_a_dropped_watch_is_resumed_until_the_answer(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 7)

    async def drop_then_answer() -> None:
        while not cluster.world.pending_requests:
            await asyncio.sleep(0.001)
        cluster.client.drop_watches()
        await asyncio.sleep(0.01)  # the webhook finds the request pending and watches again
        await cluster.reconciler().reconcile(REQUESTS_KEY)

    binder = asyncio.create_task(drop_then_answer())
    vmi = vmi_of(vm)
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    await binder
    assert device_names(out) == [H100_SLOT.format(7)]


async def test_a_request_deleted_before_its_answer_denies(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})

    async def delete_request() -> None:
        while not requests_in(cluster):
            await asyncio.sleep(0.001)
        (req,) = requests_in(cluster)
        await cluster.client.delete(GPUBindRequest, req.metadata.name, NS)

    remover = asyncio.create_task(delete_request())
    response = await cluster.admitter().admit(review(vmi_of(vm)))
    await remover
    assert response["response"]["allowed"] is False
    assert "deleted before gpu-binder answered" in response["response"]["status"]["message"]


async def test_a_disabled_binder_denies_at_once_instead_of_waiting(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    response = await cluster.admitter(enabled=False).admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    assert "gpu-binder is disabled" in response["response"]["status"]["message"]
    assert await cluster.requests_left() == []


async def test_an_answer_given_at_creation_is_taken_without_waiting(cluster: Cluster) -> None:
    class AnsweringClient(MemoryClient):
        """An API whose create already returns the binder's answer (a fast binder)."""

        async def create(self, obj: Any, dry_run: bool = False) -> Any:
            created = await super().create(obj, dry_run)
            if not isinstance(created, GPUBindRequest):
                return created
            status = created.status.model_copy(
                update={"phase": RequestPhase.FAILED, "message": "no h100 anywhere"}
            )
            return await self.update_status(created.model_copy(update={"status": status}))

    vm = cluster.vm("vm1", {"h100": 1})
    client = AnsweringClient()
    admitter = Admitter(cluster.world, client)
    response = await asyncio.wait_for(admitter.admit(review(vmi_of(vm))), 1)
    assert response["response"]["status"]["message"] == "no h100 anywhere"


async def test_decide_and_answer_compose_without_waiting(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-c", 6)
    body = review(vmi_of(vm))
    admitter = cluster.admitter()
    decision = admitter.decide(body)
    assert isinstance(decision, NeedsRequest)
    created = await cluster.client.create(decision.request)
    await cluster.reconciler().reconcile(REQUESTS_KEY)
    answered = await cluster.client.get(GPUBindRequest, created.metadata.name, NS)
    out = patched(admitter.answer(body, answered), body["request"]["object"])
    assert device_names(out) == [H100_SLOT.format(6)]


async def test_a_standalone_vmi_is_its_own_order(cluster: Cluster) -> None:
    vm = cluster.vm("solo", {"h100": 1})
    vmi = vmi_of(vm)
    del vmi["metadata"]["ownerReferences"]
    await cluster.client.delete(VirtualMachine, "solo", NS)  # only its template is wanted
    decision = cluster.admitter().decide(review(vmi))
    assert isinstance(decision, NeedsRequest)
    assert decision.request.metadata.owner_references == ()
    assert (decision.request.spec.vm.name, decision.request.spec.vm.uid) == ("solo", "")


# --- slot resources named by the VMI itself --------------------------------------------


async def test_a_vmi_naming_another_sets_slot_resource_is_denied(cluster: Cluster) -> None:
    victim = cluster.vm("victim", {"h100": 1})
    theirs = cluster.gpu("node-a", 3, vm=victim)
    thief = cluster.vm("thief", {})
    gpus = [{"name": "g", "deviceName": device_slot(theirs)}]
    response = await cluster.admitter().admit(
        review(vmi_of(thief, domain={"devices": {"gpus": gpus}}))
    )
    assert response["response"]["allowed"] is False
    assert "no tenant can reach another's GPU" in response["response"]["status"]["message"]
    assert await cluster.requests_left() == []


async def test_a_vmi_asking_for_a_slot_resource_in_its_limits_is_denied(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {})
    slot = H100_SLOT.format(3)
    vmi = vmi_of(vm, domain={"devices": {}, "resources": {"limits": {slot: "1"}}})
    response = await cluster.admitter().admit(review(vmi))
    assert response["response"]["allowed"] is False
    assert slot in response["response"]["status"]["message"]


async def test_a_vmi_naming_its_own_slot_resources_is_admitted_on_its_node(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    mine = cluster.gpu("node-b", 3, vm=vm)
    gpus = [{"name": "g", "deviceName": device_slot(mine)}]
    vmi = vmi_of(vm, domain={"devices": {"gpus": gpus}})
    out = patched(await cluster.admitter().admit(review(vmi)), vmi)
    assert device_names(out) == [device_slot(mine)]
    assert node_terms(out) == [{"matchFields": [on("node-b")]}]


# --- dry runs, malformed input, failures -----------------------------------------------


async def test_a_dry_run_creates_no_request_and_warns(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    response = await cluster.admitter().admit(review(vmi_of(vm), dry_run=True))
    assert response["response"]["allowed"] is True
    assert "patch" not in response["response"]
    assert response["response"]["warnings"][0].startswith("dry run:")
    assert await cluster.requests_left() == []
    assert cluster.client.writes == 0


async def test_a_dry_run_with_a_complete_set_is_patched(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 2, vm=vm)
    vmi = vmi_of(vm)
    out = patched(await cluster.admitter().admit(review(vmi, dry_run=True)), vmi)
    assert device_names(out) == [H100_SLOT.format(2)]


@pytest.mark.parametrize(
    "body",
    [
        "not a review",
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"request": {"operation": "CREATE", "object": {}}},
        {"request": {"uid": "u", "operation": "CREATE", "object": ["a"]}},
    ],
    ids=["not-a-dict", "no-request", "no-uid", "object-not-a-dict"],
)
async def test_a_malformed_review_raises_bad_review_for_a_400(
    cluster: Cluster, body: object
) -> None:
    with pytest.raises(BadReview) as caught:
        await cluster.admitter().admit(body)
    assert caught.value.reason


async def test_an_unexpected_error_denies_instead_of_raising(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})

    def broken(key: str) -> list[GPUDevice]:
        raise RuntimeError("index corrupted")

    monkeypatch.setattr(cluster.world.devices, "set_of", broken)
    admitter = cluster.admitter()
    response = await admitter.admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    assert "RuntimeError: index corrupted" in response["response"]["status"]["message"]
    decision = admitter.decide(review(vmi_of(vm)))
    assert isinstance(decision, Respond)
    assert decision.response["response"]["allowed"] is False
