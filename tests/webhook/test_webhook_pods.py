"""The pod webhook (DESIGN §4): KubeVirt's pods that carry a VMI's GPUs are pinned to its
set's node at CREATE, and a pod holding GPUs that are not its VMI's set is refused.

The pods are rendered from the VMI as the VMI webhook admitted it (its entries rewritten
to slot resources), the way KubeVirt renders them (sim.launcher follows template.go).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import DEVICES_ANNOTATION
from gpu_binder.binder.config import Config
from gpu_binder.cache import World, feed, listed
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.admission import outcome
from gpu_binder.sim.builders import vm_object
from gpu_binder.sim.launcher import render_launcher_pod
from gpu_binder.webhook.pods import PodPinner
from gpu_binder.webhook.review import BadReview, review_request

from .webhook_cluster import NS, Cluster, patched, review, vmi_of

H100_SLOT = "gpu.cozystack.io/10de-2330-s{}"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
USER_TERM = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
# KubeVirt's own requirement in every required term of a host-model VMI's pods.
HOST_MODEL = {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}


def on(node: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def pinned_to(node: str) -> list[dict[str, Any]]:
    """The required terms of a pod KubeVirt rendered with no affinity of the VMI's, pinned."""
    return [{"matchExpressions": [HOST_MODEL], "matchFields": [on(node)]}]


async def started(cluster: Cluster, vm: VirtualMachine, **spec: Any) -> VirtualMachineInstance:
    """The VMI of vm as the VMI webhook admitted it, stored (the API server gave it a uid)."""
    vmi = vmi_of(vm, **spec)
    admitted = patched(await cluster.admitter().admit(review(vmi)), vmi)
    return cluster.client.put(VirtualMachineInstance.from_dict(admitted))


def without_affinity(vmi: VirtualMachineInstance) -> dict[str, Any]:
    """The VMI after KubeVirt's LiveUpdate sync gave it its template's (none)."""
    raw = vmi.to_dict()
    raw["spec"].pop("affinity", None)
    return raw


def pod_review(pod: dict[str, Any], uid: str = "pod-1") -> dict[str, Any]:
    return review_request(pod, uid=uid, namespace=NS, group="", version="v1", kind="Pod")


def pinner(cluster: Cluster, world: World | None = None, **config: Any) -> PodPinner:
    return PodPinner(world or cluster.world, Config(**config), client=cluster.client)


def admitted(response: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    result = outcome(pod, response)
    assert isinstance(result, dict), result
    return result


def denial(response: dict[str, Any]) -> str:
    body = response["response"]
    assert body["allowed"] is False, body
    assert body["status"]["code"] == 403
    return str(body["status"]["message"])


def terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = pod["spec"]["affinity"]["nodeAffinity"][REQUIRED][
        "nodeSelectorTerms"
    ]
    return found


def replica(cluster: Cluster) -> World:
    """Another replica's cache, as it is now; it sees no later change (its watch lags)."""
    world = World()
    namespace = Config().kubevirt_namespace
    feed(world, listed(cluster.client.objects, namespace), namespace)
    return world


# --- pinned --------------------------------------------------------------------------------


async def test_a_launcher_pod_is_pinned_to_its_sets_node_though_its_vmi_lost_the_affinity(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 2})
    cluster.gpu("node-b", 2, vm=vm)
    cluster.gpu("node-b", 5, vm=vm)
    vmi = await started(cluster, vm)
    pod = render_launcher_pod(without_affinity(vmi))
    assert terms(pod) == [{"matchExpressions": [HOST_MODEL]}], "KubeVirt's term, no pin"

    out = admitted(await pinner(cluster).admit(pod_review(pod)), pod)

    assert terms(out) == pinned_to("node-b")
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    assert {H100_SLOT.format(2), H100_SLOT.format(5)} <= set(limits)


async def test_the_users_terms_stay_each_anded_with_the_sets_node(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-c", 0, vm=vm)
    vmi = await started(cluster, vm)
    raw = without_affinity(vmi)
    # The VM template's own affinity, which the LiveUpdate sync put back on the VMI.
    raw["spec"]["affinity"] = {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [USER_TERM, {"matchFields": []}]}}
    }
    pod = render_launcher_pod(raw)

    out = admitted(pinner(cluster).decide(pod_review(pod)), pod)

    assert terms(out) == [
        {
            "matchExpressions": [*USER_TERM["matchExpressions"], HOST_MODEL],
            "matchFields": [on("node-c")],
        },
        {"matchExpressions": [HOST_MODEL], "matchFields": [on("node-c")]},
    ]


async def test_the_wait_for_first_consumer_temporary_pod_is_pinned_like_the_launcher(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 3, vm=vm)
    vmi = await started(cluster, vm)
    temp = render_launcher_pod(without_affinity(vmi), temp=True)
    assert temp["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"] == "true"

    out = admitted(pinner(cluster).decide(pod_review(temp)), temp)

    assert terms(out) == pinned_to("node-a")


async def test_a_pod_rendered_before_the_sync_keeps_its_one_pin(cluster: Cluster) -> None:
    """Rendered from the VMI as admitted, the pod already requires the node: no patch."""
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    vmi = await started(cluster, vm)
    pod = render_launcher_pod(vmi.to_dict())

    response = pinner(cluster).decide(pod_review(pod))

    assert response["response"] == {"uid": "pod-1", "allowed": True}


async def test_a_pod_of_a_node_pinning_class_is_pinned_to_its_sets_node(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"l40s": 2})
    cluster.gpu("node-c", 0, cls="l40s", vm=vm)
    cluster.gpu("node-c", 1, cls="l40s", vm=vm)
    vmi = await started(cluster, vm)
    pod = render_launcher_pod(without_affinity(vmi))
    assert pod["spec"]["containers"][0]["resources"]["limits"][cluster.resource_of("l40s")] == "2"

    out = admitted(pinner(cluster).decide(pod_review(pod)), pod)

    assert terms(out) == pinned_to("node-c")


async def test_a_standalone_vmis_pod_is_pinned_to_the_set_of_the_vmi(cluster: Cluster) -> None:
    # A VMI with no VM is its own order: its set is bound under its own name.
    solo = vm_object("solo", NS, [cluster.resource_of("h100")])
    cluster.gpu("node-a", 4, vm=solo)
    raw = vmi_of(solo)
    raw["metadata"].pop("ownerReferences")
    vmi = cluster.client.put(
        VirtualMachineInstance.from_dict(patched(await cluster.admitter().admit(review(raw)), raw))
    )
    pod = render_launcher_pod(without_affinity(vmi))

    out = admitted(pinner(cluster).decide(pod_review(pod)), pod)

    assert terms(out) == pinned_to("node-a")


# --- passing untouched ---------------------------------------------------------------------


async def test_a_pod_without_gpu_resources_passes_untouched(cluster: Cluster) -> None:
    vm = cluster.vm("plain", {})
    vmi = cluster.client.put(VirtualMachineInstance.from_dict(vmi_of(vm)))
    pod = render_launcher_pod(vmi.to_dict())
    assert "devices.kubevirt.io/kvm" in pod["spec"]["containers"][0]["resources"]["limits"]

    response = await pinner(cluster).admit(pod_review(pod))

    assert response["response"] == {"uid": "pod-1", "allowed": True}
    assert cluster.client.writes == 0


async def test_a_pod_of_a_device_class_resource_name_is_not_the_pod_webhooks(
    cluster: Cluster,
) -> None:
    """A Device class's resourceName is served by no plugin gpu-binder runs; the VMI
    webhook rewrites it, and only slots and Node classes are pinned on pods."""
    vm = cluster.vm("vm1", {"h100": 1})
    vmi = cluster.client.put(VirtualMachineInstance.from_dict(vmi_of(vm)))
    pod = render_launcher_pod(vmi.to_dict())

    response = pinner(cluster).decide(pod_review(pod))

    assert response["response"] == {"uid": "pod-1", "allowed": True}


async def test_a_node_pinning_pod_in_an_excluded_namespace_passes_untouched(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"l40s": 1})
    vmi = cluster.client.put(VirtualMachineInstance.from_dict(vmi_of(vm)))
    pod = render_launcher_pod(vmi.to_dict())

    response = pinner(cluster, excluded_namespaces=(NS,)).decide(pod_review(pod))

    assert response["response"] == {"uid": "pod-1", "allowed": True}


async def test_an_update_passes_untouched(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    pod = render_launcher_pod(without_affinity(await started(cluster, vm)))
    body = pod_review(pod)
    body["request"]["operation"] = "UPDATE"

    assert pinner(cluster).decide(body)["response"] == {"uid": "pod-1", "allowed": True}


# --- refused -------------------------------------------------------------------------------


async def test_a_pod_holding_a_slot_of_another_vms_set_is_refused(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    other = cluster.vm("vm2", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    cluster.gpu("node-a", 6, vm=other)
    raw = without_affinity(await started(cluster, vm))
    raw["spec"]["domain"]["devices"]["gpus"][0]["deviceName"] = H100_SLOT.format(6)
    pod = render_launcher_pod(raw)

    message = denial(await pinner(cluster).admit(pod_review(pod)))

    assert message == (
        f"the pod holds slot resource {H100_SLOT.format(6)}, which is not one of the GPUs "
        f"of VM {NS}/vm1 (on node-b): no VM can reach another's GPU"
    )


async def test_a_foreign_slot_is_refused_in_an_excluded_namespace_too(cluster: Cluster) -> None:
    """Excluded namespaces skip binding, not the check: slots are nobody's to name."""
    vm = cluster.vm("vm1", {"h100": 1})
    other = cluster.vm("vm2", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    cluster.gpu("node-a", 6, vm=other)
    raw = without_affinity(await started(cluster, vm))
    raw["spec"]["domain"]["devices"]["gpus"][0]["deviceName"] = H100_SLOT.format(6)
    pod = render_launcher_pod(raw)

    message = denial(pinner(cluster, excluded_namespaces=(NS,)).decide(pod_review(pod)))

    assert f"the pod holds slot resource {H100_SLOT.format(6)}" in message


async def test_a_pod_holding_its_sets_slot_twice_is_refused(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    raw = without_affinity(await started(cluster, vm))
    gpus = raw["spec"]["domain"]["devices"]["gpus"]
    gpus.append({**gpus[0], "name": "again"})
    pod = render_launcher_pod(raw)

    message = denial(pinner(cluster).decide(pod_review(pod)))

    assert f"slot resource {H100_SLOT.format(1)}, which is not one of the GPUs" in message


async def test_a_pod_of_a_vmi_whose_vm_holds_no_set_is_refused(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    raw = vmi_of(vm)
    raw["spec"]["domain"]["devices"]["gpus"][0]["deviceName"] = H100_SLOT.format(0)
    vmi = cluster.client.put(VirtualMachineInstance.from_dict(raw))
    pod = render_launcher_pod(vmi.to_dict())

    message = denial(await pinner(cluster).admit(pod_review(pod)))

    assert message == (
        f"VM {NS}/vm1 holds no GPUs in gpu-binder, so its pod may not hold "
        f"{H100_SLOT.format(0)}; restart the VM for gpu-binder to bind its GPUs"
    )


async def test_a_pod_with_slots_but_no_vmi_is_refused(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    pod = render_launcher_pod(without_affinity(await started(cluster, vm)))
    del pod["metadata"]["ownerReferences"]
    del pod["metadata"]["labels"]["kubevirt.io/created-by"]

    message = denial(pinner(cluster).decide(pod_review(pod)))

    assert message.startswith(
        f"the pod holds GPUs ({H100_SLOT.format(1)}) but belongs to no VirtualMachineInstance"
    )


async def test_a_pod_of_a_vm_recreated_under_the_same_name_does_not_get_the_old_set(
    cluster: Cluster,
) -> None:
    old = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=old)
    vmi = await started(cluster, old)
    raw = without_affinity(vmi)
    # The VMI's VM is another object now: its owner reference names another uid.
    raw["metadata"]["ownerReferences"][0]["uid"] = "uid-of-the-new-vm"
    vmi = cluster.client.put(VirtualMachineInstance.from_dict(raw))
    pod = render_launcher_pod(vmi.to_dict())

    message = denial(pinner(cluster).decide(pod_review(pod)))

    assert message.startswith(f"VM {NS}/vm1 holds no GPUs in gpu-binder")


async def test_a_node_pinning_pod_asking_more_than_its_set_holds_is_refused(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"l40s": 1})
    cluster.gpu("node-c", 0, cls="l40s", vm=vm)
    raw = without_affinity(await started(cluster, vm))
    gpus = raw["spec"]["domain"]["devices"]["gpus"]
    gpus.append({**gpus[0], "name": "more"})
    pod = render_launcher_pod(raw)

    message = denial(pinner(cluster).decide(pod_review(pod)))

    assert message == f"the pod asks for 2 × l40s but VM {NS}/vm1 holds 1 on node-c"


async def test_a_pod_naming_another_node_is_refused(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    pod = render_launcher_pod(without_affinity(await started(cluster, vm)))
    pod["spec"]["nodeName"] = "node-a"

    message = denial(pinner(cluster).decide(pod_review(pod)))

    assert message == f"the pod names node node-a, but the GPUs of VM {NS}/vm1 are on node-b"


async def test_a_pod_of_a_vmi_the_cache_does_not_have_is_refused_for_a_retry(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    vmi = await started(cluster, vm)
    cluster.world.apply(WatchEvent("DELETED", vmi))
    pod = render_launcher_pod(without_affinity(vmi))

    message = denial(pinner(cluster).decide(pod_review(pod)))

    assert message == (
        f"VirtualMachineInstance {NS}/vm1 is not known to gpu-binder yet; KubeVirt will retry"
    )


def test_a_malformed_review_is_a_bad_review(cluster: Cluster) -> None:
    with pytest.raises(BadReview, match="no request"):
        pinner(cluster).decide({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})


async def test_admit_raises_bad_review_for_a_malformed_one_too(cluster: Cluster) -> None:
    with pytest.raises(BadReview, match="must be a JSON object"):
        await pinner(cluster).admit([])


# --- reading past a lagging cache (admit) -----------------------------------------------------


async def test_admit_reads_the_vmi_its_cache_does_not_have_yet(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-b", 1, vm=vm)
    vmi = await started(cluster, vm)
    cluster.world.apply(WatchEvent("DELETED", vmi))
    pod = render_launcher_pod(without_affinity(vmi))

    out = admitted(await pinner(cluster).admit(pod_review(pod)), pod)

    assert terms(out) == pinned_to("node-b")


async def test_admit_pins_to_where_the_set_is_not_where_a_lagging_cache_last_saw_it(
    cluster: Cluster,
) -> None:
    """The set moved from node-a to node-b (same slot) while the VM was stopped; this
    replica's watch has not seen the move. Pinned from its cache, the pod would take slot 2
    of node-a: whatever GPU is there now."""
    vm = cluster.vm("vm1", {"h100": 1})
    was = cluster.gpu("node-a", 2, vm=vm)
    lagging = replica(cluster)
    cluster.client.put(
        was.model_copy(
            update={"status": was.status.model_copy(update={"binding": None, "phase": "Available"})}
        )
    )
    cluster.gpu("node-b", 2, vm=vm)
    vmi = await started(cluster, vm)
    lagging.apply(WatchEvent("ADDED", vmi))
    pod = render_launcher_pod(without_affinity(vmi))
    assert terms(admitted(PodPinner(lagging).decide(pod_review(pod)), pod)) == pinned_to(
        "node-a"
    ), "the cache alone pins where the set was"

    out = admitted(await pinner(cluster, lagging).admit(pod_review(pod)), pod)

    assert terms(out) == pinned_to("node-b")


async def test_admit_counts_only_devices_bound_to_the_order_whatever_the_annotation_names(
    cluster: Cluster,
) -> None:
    """The devices annotation is the tenant's to write: naming another VM's GPU there gets
    the pod refused, not pinned to that GPU's node."""
    vm = cluster.vm("vm1", {"h100": 1})
    other = cluster.vm("vm2", {"h100": 1})
    theirs = cluster.gpu("node-c", 1, vm=other)
    lagging = replica(cluster)  # has not seen vm1's set yet
    cluster.gpu("node-b", 1, vm=vm)
    raw = without_affinity(await started(cluster, vm))
    raw["metadata"]["annotations"][DEVICES_ANNOTATION] = theirs.metadata.name
    vmi = cluster.client.put(VirtualMachineInstance.from_dict(raw))
    lagging.apply(WatchEvent("ADDED", vmi))
    pod = render_launcher_pod(vmi.to_dict())

    message = denial(await pinner(cluster, lagging).admit(pod_review(pod)))

    assert message.startswith(f"VM {NS}/vm1 holds no GPUs in gpu-binder")
