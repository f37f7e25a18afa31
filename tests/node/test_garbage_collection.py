"""Garbage collection by the real kube-controller-manager (issue 12, item 3): what
gpu-binder's objects say about their owners is what Kubernetes acts on."""

from __future__ import annotations

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
from gpu_binder.webhook.bindrequest import bind_request
from gpu_binder.webhook.target import Target

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


def test_a_deleted_namespace_takes_its_vms_vmis_pods_and_usage_records(
    tier: NodeTier,
) -> None:
    cp = tier.cp
    ns = namespace(cp, f"gone-{uid()}")
    vm(cp, ns, "vm", 2, tier.resource)
    wait_bound(cp, ns, "vm", 2)
    vmi = start_vmi(cp, ns, "vm")
    pod = wait_running(cp, launch(cp, vmi))
    report_running(cp, vmi, pod["spec"]["nodeName"])
    records = wait_for(
        lambda: (
            len(items := (get(cp, RECORDS.format(ns=ns)) or {}).get("items") or []) == 2 and items
        ),
        30,
        "two open usage records",
    )

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
    # The ledger's records were namespaced objects and went too: where the ledger lives
    # is issue 13's decision; this states what Kubernetes does with them today.
    assert len(records) == 2
    assert not (get(cp, RECORDS.format(ns=ns)) or {}).get("items")
