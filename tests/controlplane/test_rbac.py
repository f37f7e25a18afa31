"""RBAC on a real API server: the binder's ClusterRole grants what it uses and no more; a
tenant reads its GPU records and writes none of the binder's state.

Every binder in these tests runs impersonating the binder's ServiceAccount (conftest), so
the other tests also prove the ClusterRole is enough for the binder to work.
"""

from __future__ import annotations

import pytest
from realcluster import BINDER_SA, Fleet, namespace, put

from conftest import BinderSetup
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUDeviceStatus, GPUUsageRecord, GPUUsageRecordSpec, VMRef
from gpu_binder.client.errors import Forbidden
from gpu_binder.kube import KubeClient, connect

pytestmark = pytest.mark.controlplane

GROUP = "gpu.cozystack.io"


def allowed(
    setup: BinderSetup,
    verb: str,
    resource: str,
    group: str = GROUP,
    namespace: str = "",
    sub: str = "",
) -> bool:
    user, groups = BINDER_SA
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": list(groups),
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "namespace": namespace,
                "subresource": sub,
            },
        },
    }
    resp = setup.cp.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert resp.ok, resp.body
    return bool(resp.json()["status"].get("allowed"))


@pytest.mark.parametrize(
    ("verb", "resource", "group", "sub"),
    [
        ("watch", "gpudevices", GROUP, ""),
        ("update", "gpudevices", GROUP, "status"),
        ("update", "gpubindrequests", GROUP, "status"),
        ("create", "gpubindrequests", GROUP, ""),
        ("create", "gpuusagerecords", GROUP, ""),
        ("watch", "virtualmachineinstances", "kubevirt.io", ""),
        # The webhooks read past a lagging cache: the pod webhook a VMI it has not seen
        # yet and its set's devices, the VMI webhook the devices a bind request names.
        ("get", "virtualmachineinstances", "kubevirt.io", ""),
        ("get", "gpudevices", GROUP, ""),
        ("patch", "virtualmachineinstances", "kubevirt.io", ""),
        ("patch", "virtualmachines", "kubevirt.io", ""),
        ("patch", "kubevirts", "kubevirt.io", ""),
        ("update", "nodes", "", "status"),
        ("create", "events", "events.k8s.io", ""),
        ("watch", "controllerrevisions", "apps", ""),
    ],
)
def test_the_binder_may_do_what_it_does(
    binder_setup: BinderSetup, verb: str, resource: str, group: str, sub: str
) -> None:
    assert allowed(binder_setup, verb, resource, group, "any", sub)


@pytest.mark.parametrize(
    ("verb", "resource", "group", "sub"),
    [
        ("delete", "gpudevices", GROUP, ""),
        ("create", "gpudevices", GROUP, ""),
        ("delete", "gpuusagerecords", GROUP, ""),
        ("update", "gpuclasses", GROUP, ""),
        ("update", "virtualmachineinstances", "kubevirt.io", ""),
        ("update", "virtualmachines", "kubevirt.io", ""),
        ("update", "nodes", "", ""),
        ("get", "secrets", "", ""),
        ("create", "pods", "", ""),
        ("create", "controllerrevisions", "apps", ""),
        ("update", "controllerrevisions", "apps", ""),
    ],
)
def test_the_binder_may_do_nothing_else(
    binder_setup: BinderSetup, verb: str, resource: str, group: str, sub: str
) -> None:
    assert not allowed(binder_setup, verb, resource, group, "any", sub)


def test_the_binder_holds_leases_in_its_own_namespace_only(binder_setup: BinderSetup) -> None:
    assert allowed(binder_setup, "update", "leases", "coordination.k8s.io", "gpu-binder")
    assert not allowed(binder_setup, "update", "leases", "coordination.k8s.io", "kube-system")


async def test_a_tenant_reads_its_records_but_writes_no_gpu_state(
    binder_setup: BinderSetup, admin: KubeClient
) -> None:
    cp = binder_setup.cp
    ns = namespace(cp)
    alice = cp.add_user("alice", ["tenants"])
    for role in ("edit", "gpu-binder-tenant"):
        put(
            cp,
            {
                "kind": "RoleBinding",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"name": role, "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
                ],
            },
        )
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_node("a")
    (device,) = await fleet.devices()
    record = GPUUsageRecord(
        metadata=ObjectMeta(name=f"r-{fleet.id}", namespace=ns),
        spec=GPUUsageRecordSpec(
            vm="vm", vmi=VMRef(name="vm", uid="u"), device="d", start="2026-01-01T00:00:00Z"
        ),  # type: ignore[arg-type]
    )
    stored = await admin.create(record)

    async with await connect(str(alice.kubeconfig)) as tenant:
        assert [r.metadata.name for r in (await tenant.list(GPUUsageRecord, ns)).items] == [
            stored.metadata.name
        ]
        with pytest.raises(Forbidden):
            await tenant.create(
                record.model_copy(update={"metadata": ObjectMeta(name="forged", namespace=ns)})
            )
        with pytest.raises(Forbidden):
            await tenant.update(stored)
        with pytest.raises(Forbidden):
            await tenant.update_status(
                device.model_copy(update={"status": GPUDeviceStatus(class_name="mine")})
            )
