"""RBAC on a real API server: the binder's ClusterRole grants what it uses and no more; a
tenant reads its GPU records and writes none of the binder's state.

Every binder in these tests runs impersonating the binder's ServiceAccount (conftest), so
the other tests also prove the ClusterRole is enough for the binder to work.
"""

from __future__ import annotations

import importlib

import pytest
import yaml
from realcluster import BINDER_SA, DEPLOY, Fleet, namespace, put

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
        ("patch", "gpudevices", GROUP, ""),
        ("patch", "nodes", "", "status"),
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
        # Least privilege (issue 11): the finalizer is a patch, the node condition a status
        # patch, and nothing reads classes, VMs, nodes or the KubeVirt CR but the informers.
        ("update", "gpudevices", GROUP, ""),
        ("update", "nodes", "", "status"),
        ("get", "nodes", "", ""),
        ("get", "gpuclasses", GROUP, ""),
        ("get", "virtualmachines", "kubevirt.io", ""),
        ("get", "kubevirts", "kubevirt.io", ""),
        ("update", "kubevirts", "kubevirt.io", ""),
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


# --- every verb granted, and the code that uses it -------------------------------------

RBAC = DEPLOY / "binder" / "rbac.yaml"
# (group, resource, verb) -> where gpu-binder's code makes that request. The test below
# fails when a grant has no entry here (unused) or an entry no grant (the binder would be
# refused); each entry names a function that exists.
USES: dict[tuple[str, str, str], str] = {
    **{
        (GROUP, kind, verb): "gpu_binder.kube.cache:Informer.relist (list), "
        "Informer._watch_until_resync (watch), of cache.watched.WATCHED"
        for kind in ("gpuclasses", "gpudevices", "gpubindrequests", "gpuusagerecords")
        for verb in ("list", "watch")
    },
    **{
        ("kubevirt.io", kind, verb): "gpu_binder.kube.cache:Informer.relist (list), "
        "Informer._watch_until_resync (watch), of cache.watched.WATCHED"
        for kind in ("virtualmachines", "virtualmachineinstances", "kubevirts")
        for verb in ("list", "watch")
    },
    **{
        (group, kind, verb): "gpu_binder.kube.cache:Informer.relist (list), "
        "Informer._watch_until_resync (watch), of cache.watched.WATCHED"
        for group, kind in (
            ("", "nodes"),
            ("", "resourcequotas"),
            ("", "pods"),
            ("apps", "controllerrevisions"),
        )
        for verb in ("list", "watch")
    },
    (GROUP, "gpudevices", "get"): "gpu_binder.webhook.pods:PodPinner.admit (a set's devices "
    "fresh), gpu_binder.webhook.decision:Admitter._read_device (the devices a pin or an answer "
    "names, unless this leader's own write of them is what its world holds)",
    (GROUP, "gpubindrequests", "get"): "gpu_binder.webhook.bindrequest:wait_for_answer "
    "(its request, when the watch ends)",
    (GROUP, "gpuusagerecords", "get"): "gpu_binder.binder.writer:Writer.make "
    "(Create answered AlreadyExists: a closed record is not cached)",
    (GROUP, "gpudevices", "patch"): "gpu_binder.binder.writer:Writer._finalizers "
    "(the device finalizer, binder.steps.devices.finalizers and release.release_deleted)",
    (GROUP, "gpudevices/status", "update"): "gpu_binder.binder.writer:Writer.make "
    "(placement and phases, the steps' device_status)",
    (GROUP, "gpuclasses/status", "update"): "gpu_binder.binder.steps.status:class_status",
    (GROUP, "gpubindrequests/status", "update"): "gpu_binder.binder.steps.requests:bind_requests",
    (GROUP, "gpubindrequests", "create"): "gpu_binder.webhook.bindrequest:create",
    (GROUP, "gpubindrequests", "delete"): "gpu_binder.webhook.bindrequest:forget (answered), "
    "gpu_binder.binder.steps.requests:bind_requests (left behind)",
    (GROUP, "gpuusagerecords", "create"): "gpu_binder.binder.steps.records:usage_records "
    "(open), gpu_binder.binder.ledgerwrites:open_record (Reserved), "
    "gpu_binder.binder.ledgerwrites:write_copy (the tenant's copy)",
    (GROUP, "gpuusagerecords", "update"): "gpu_binder.binder.steps.records:usage_records "
    "(close), gpu_binder.binder.ledgerwrites:write_copy, "
    "gpu_binder.binder.reconciler:Reconciler._label_unlabelled_records (the ledger's move)",
    ("kubevirt.io", "virtualmachineinstances", "get"): "gpu_binder.webhook.pods:PodPinner.admit",
    ("kubevirt.io", "virtualmachineinstances", "patch"): "gpu_binder.binder.writer:"
    "Writer._finalizers (the usage finalizer, binder.steps.records.usage_finalizers)",
    ("kubevirt.io", "virtualmachines", "patch"): "gpu_binder.binder.writer:"
    "Writer.make (the devices annotation, binder.steps.tenantview.vm_annotations)",
    ("kubevirt.io", "kubevirts", "patch"): "gpu_binder.kube.client:KubeClient.apply "
    "(binder.steps.settings.settings: permittedHostDevices)",
    ("", "nodes/status", "patch"): "gpu_binder.binder.writer:Writer.make (NodeCondition)",
    ("events.k8s.io", "events", "create"): "gpu_binder.binder.events:ClientRecorder.record",
    ("authentication.k8s.io", "tokenreviews", "create"): "gpu_binder.kube.metricsauth:"
    "TokenAuthorizer._review (who scrapes /metrics)",
    ("authorization.k8s.io", "subjectaccessreviews", "create"): "gpu_binder.kube.metricsauth:"
    "TokenAuthorizer._review (may it get /metrics)",
    ("coordination.k8s.io", "leases", "get"): "gpu_binder.kube.leaderelection:LeaderElector",
    ("coordination.k8s.io", "leases", "create"): "gpu_binder.kube.leaderelection:LeaderElector",
    ("coordination.k8s.io", "leases", "update"): "gpu_binder.kube.leaderelection:LeaderElector",
}


def granted() -> set[tuple[str, str, str]]:
    roles = [
        d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] in ("ClusterRole", "Role")
    ]
    return {
        (group, resource, verb)
        for role in roles
        # Roles for others to hold: tenants, and whoever scrapes /metrics.
        if role["metadata"]["name"] not in ("gpu-binder-tenant", "gpu-binder-metrics-reader")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_every_verb_granted_is_one_the_code_uses_and_no_other() -> None:
    assert granted() == set(USES)


@pytest.mark.parametrize("where", sorted(set(USES.values())))
def test_the_code_paths_named_exist(where: str) -> None:
    for part in where.split(", "):
        path = part.split(" (")[0]
        if ":" not in path:
            continue
        module, _, qualname = path.partition(":")
        found: object = importlib.import_module(module)
        for attr in qualname.split("."):
            found = getattr(found, attr)
