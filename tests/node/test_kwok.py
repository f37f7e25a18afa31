"""KWOK nodes under the real scheduler: simulated GPU nodes serving slot resources as the
agent would; a launcher pod lands on its set's node although every node offers the same
slot names (issue 12, item 5, in small; the scale is `gpu-binder bench start`)."""

from __future__ import annotations

from launcher import render_launcher_pod
from nodecluster import KwokNodes, NodeTier, create, get, merge_patch, wait_for
from play import bound_set, namespace, set_node, start_vmi, vm, wait_bound
from realcluster import uid

from gpu_binder.sim import builders


def test_kwok_nodes_are_ready_with_their_slot_resources(tier: NodeTier, kwok: KwokNodes) -> None:
    slots = {builders.slot_resource(i, "0x26b9") for i in range(4)}

    def ready(name: str) -> bool:
        node = get(tier.cp, f"/api/v1/nodes/{name}") or {}
        status = node.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        taints = (node.get("spec") or {}).get("taints") or []
        return (
            conditions.get("Ready") == "True"
            and not taints
            and slots <= set(status.get("allocatable") or {})
        )

    for name in kwok.names:
        wait_for(lambda name=name: ready(name), 60, f"{name} Ready and untainted")


def test_the_launcher_pod_lands_on_its_sets_node(tier: NodeTier, kwok: KwokNodes) -> None:
    cp = tier.cp
    ns = namespace(cp, f"kwok-{uid()}")
    vm(cp, ns, "vm", 2, kwok.resource)
    bound = wait_bound(cp, ns, "vm", 2)
    node = {
        get(cp, f"/apis/gpu.cozystack.io/v1alpha1/gpudevices/{d}")["spec"]["nodeName"]
        for d in bound.values()
    }  # type: ignore[index]
    [node_name] = node
    vmi = start_vmi(cp, ns, "vm")
    pod = create(cp, f"/api/v1/namespaces/{ns}/pods", render_launcher_pod(vmi))
    path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
    placed = wait_for(
        lambda: (get(cp, path) or {}).get("spec", {}).get("nodeName"), 30, "scheduled"
    )
    assert placed == node_name
    # KWOK plays the kubelet: the pod runs.
    wait_for(
        lambda: ((get(cp, path) or {}).get("status") or {}).get("phase") == "Running", 30, "Running"
    )
    assert bound_set(cp, ns, "vm") == bound


def test_the_launcher_pod_lands_on_its_sets_node_after_kubevirt_drops_the_vmi_affinity(
    tier: NodeTier, kwok: KwokNodes
) -> None:
    # Issue 12, item 2: with vmRolloutStrategy LiveUpdate, KubeVirt's VM controller
    # (pkg/virt-controller/watch/vm/vm.go, handleAffinityChangeRequest) replaces a VMI's
    # affinity with the template's - here none - before virt-controller renders the pod.
    # Every KWOK node offers the same slot names, so only the pod-level pin keeps the pod
    # on its set's node.
    assert len(kwok.names) > 1
    cp = tier.cp
    ns = namespace(cp, f"kwok-{uid()}")
    vm(cp, ns, "vm", 2, kwok.resource)
    bound = wait_bound(cp, ns, "vm", 2)
    node_name = set_node(cp, ns, "vm")
    # Ballast makes the set's node the scheduler's last choice (it scores CPU and memory
    # least-allocated first), so a pod the pin did not hold would land elsewhere.
    create(cp, f"/api/v1/namespaces/{ns}/pods", ballast(node_name))
    vmi = start_vmi(cp, ns, "vm")
    assert vmi["spec"].get("affinity"), "the VMI webhook pins the VMI first"
    path = f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/vm"
    vmi = merge_patch(cp, path, {"spec": {"affinity": None}})
    assert not vmi["spec"].get("affinity")
    pod = create(cp, f"/api/v1/namespaces/{ns}/pods", render_launcher_pod(vmi))
    pod_path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
    placed = wait_for(
        lambda: (get(cp, pod_path) or {}).get("spec", {}).get("nodeName"), 30, "scheduled"
    )
    assert placed == node_name
    assert bound_set(cp, ns, "vm") == bound


def ballast(node_name: str) -> dict[str, object]:
    """A pod holding most of a KWOK node's CPU and memory (it has 128 and 1Ti)."""
    requests = {"cpu": "100", "memory": "800Gi"}
    container = {"name": "ballast", "image": "ballast", "resources": {"requests": requests}}
    return {
        "metadata": {"name": "ballast"},
        "spec": {"nodeName": node_name, "containers": [container]},
    }
