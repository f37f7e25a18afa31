"""Garbage collection by the real kube-controller-manager (issue 12, item 3): what
gpu-binder's objects say about their owners is what Kubernetes acts on."""

from __future__ import annotations

from typing import Any

from nodecluster import NodeTier, create, delete, get, gone, wait_for
from play import (
    KUBEVIRT,
    bound_set,
    finished,
    launch,
    namespace,
    report_running,
    start_vmi,
    vm,
    wait_bound,
    wait_running,
)
from realcluster import uid

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.binder.config import Config
from gpu_binder.envtest import ControlPlane
from gpu_binder.webhook.bindrequest import bind_request
from gpu_binder.webhook.target import Target

LEDGER = Config().ledger_namespace
REQUESTS = "/apis/gpu.cozystack.io/v1alpha1/namespaces/{ns}/gpubindrequests"
RECORDS = "/apis/gpu.cozystack.io/v1alpha1/namespaces/{ns}/gpuusagerecords"


def test_a_vms_bind_requests_go_with_the_vm(tier: NodeTier) -> None:
    cp = tier.cp
    ns = namespace(cp, f"gc-{uid()}")
    raw = vm(cp, ns, "vm", 1, tier.resource)
    owner = VirtualMachine.from_dict(raw)
    # The request the webhook makes for the VM's VMI, as it makes it.
    target = Target(
        namespace=ns,
        vmi_name="vm",
        vm_name="vm",
        vm_uid=owner.metadata.uid,
        owned=True,
    )
    request = bind_request(target, {tier.class_name: 1}, f"vm-{uid()}").to_dict()
    created = create(cp, REQUESTS.format(ns=ns), request)
    path = f"{REQUESTS.format(ns=ns)}/{created['metadata']['name']}"

    delete(cp, f"{KUBEVIRT.format(ns=ns)}/virtualmachines/vm")
    gone(cp, path, 30, "the bind request")
    wait_for(lambda: not bound_set(cp, ns, "vm"), 60, "the VM's GPU released")


def test_a_deleted_namespace_takes_its_vms_vmis_pods_and_its_copies_not_the_ledger(
    tier: NodeTier,
) -> None:
    cp = tier.cp
    ns = namespace(cp, f"gone-{uid()}")
    vm(cp, ns, "vm", 2, tier.resource)
    wait_bound(cp, ns, "vm", 2)
    vmi = start_vmi(cp, ns, "vm")
    pod = wait_running(cp, launch(cp, vmi))
    report_running(cp, vmi, pod["spec"]["nodeName"])
    opened = wait_for(lambda: _attached(cp, RECORDS.format(ns=ns)), 30, "two open copies")

    delete(cp, f"/api/v1/namespaces/{ns}")
    # The namespace controller deletes everything in it. The VMI's usage finalizer is the
    # binder's, removed once the VMI has finished (QEMU holds the GPUs until it exits)
    # and its records are closed: virt-handler's report of the shutdown is played here.
    path = f"{KUBEVIRT.format(ns=ns)}/virtualmachineinstances/vm"
    wait_for(
        lambda: ((get(cp, path) or {}).get("metadata") or {}).get("deletionTimestamp"),
        30,
        "the VMI being deleted",
    )
    finished(cp, vmi)
    gone(cp, f"/api/v1/namespaces/{ns}", 90)
    wait_for(lambda: not bound_set(cp, ns, "vm"), 60, "the VM's GPUs released")
    # The tenant's copies went with it; the ledger's records stayed, closed (README
    # "Billing": where the ledger lives).
    assert not (get(cp, RECORDS.format(ns=ns)) or {}).get("items")
    kept = [
        r
        for r in (get(cp, RECORDS.format(ns=LEDGER)) or {}).get("items") or []
        if r["spec"].get("namespace") == ns and r["spec"].get("kind") == "Attached"
    ]
    assert sorted(r["metadata"]["name"] for r in kept) == sorted(
        r["metadata"]["name"] for r in opened
    )
    assert all(r["spec"].get("end") for r in kept)


def _attached(cp: ControlPlane, path: str) -> list[dict[str, Any]]:
    items = (get(cp, path) or {}).get("items") or []
    found = [r for r in items if r["spec"].get("kind") == "Attached"]
    return found if len(found) == 2 else []
