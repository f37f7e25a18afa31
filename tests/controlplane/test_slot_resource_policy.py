"""Only KubeVirt's virt-controller creates pods requesting gpu.cozystack.io/* resources.

The agent's device plugin serves one slot resource per GPU and hands its /dev/vfio to
whichever pod the kubelet gives the slot to; gpu-binder's webhook sees VMI CREATE only.
deploy/agent/slot-resource-policy.yaml (a ValidatingAdmissionPolicy and its binding) makes
the API server refuse any other user's pod naming such a resource, so a tenant cannot take
another tenant's GPU, or hold its slot, with a plain Pod.

On the session's API server: the policy matches only pods that request gpu.cozystack.io/*
resources and that no other test creates. virt-controller acts with a real token of
ServiceAccount kubevirt/kubevirt-controller, a tenant with a client certificate; both may
create pods in the test's namespace by RBAC, so any refusal is the policy's. The chart's
settings of the policy are rendered with helm (skipped without it, as test_helm_chart).
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import test_helm_chart
from nodeagent import install
from realcluster import DEPLOY, put, uid
from test_helm_chart import by_key, render

from gpu_binder.api.slots import format_slot
from gpu_binder.envtest import ControlPlane, User

pytestmark = pytest.mark.controlplane

# The session's helm fixture, bound here for pytest to find it in this module too.
helm = test_helm_chart.helm

POLICY = "gpu-binder-slot-resources"
KUBEVIRT = "kubevirt"
CONTROLLER = "kubevirt-controller"
CONTROLLER_USER = f"system:serviceaccount:{KUBEVIRT}:{CONTROLLER}"
WHY = (
    "gpu.cozystack.io/* resources are handed out by gpu-binder through KubeVirt; only "
    f"KubeVirt's virt-controller ({CONTROLLER_USER}) may create pods that request them"
)
SLOT = format_slot("0x10de", "0x2330", 3)  # gpu.cozystack.io/10de-2330-s3
POD_RIGHTS = {
    "apiGroups": [""],
    "resources": ["pods", "pods/resize"],
    "verbs": ["create", "get", "update", "patch"],
}


class Client:
    """Requests to the API server as one user: a client certificate or a bearer token."""

    def __init__(self, cp: ControlPlane, user: User | None = None, token: str = "") -> None:
        self.cp, self.user, self.token = cp, user, token
        self.ssl = ssl.create_default_context(cafile=str(cp.ca_file))

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        if self.user is not None:
            answer = self.cp.request(method, path, body, user=self.user)
            return answer.status, answer.json()
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.cp.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


@dataclass(frozen=True)
class Setup:
    cp: ControlPlane
    namespace: str
    tenant: Client
    controller: Client
    # Whether the policy refused a probe before the tests began (it takes a moment).
    enforced: bool

    @property
    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"


def account_token(cp: ControlPlane, namespace: str, name: str) -> str:
    """A token of ServiceAccount namespace/name (both created), as its pods get one."""
    put(cp, {"kind": "Namespace", "metadata": {"name": namespace}})
    put(cp, {"kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    answer = cp.request("POST", path, request)
    assert answer.status == 201, answer.body
    token: str = answer.json()["status"]["token"]
    return token


def grant_pods(cp: ControlPlane, namespace: str, subject: dict[str, str]) -> None:
    """Let subject create, read and change pods in namespace."""
    name = f"pods-{uid()}"
    role = {"kind": "Role", "metadata": {"name": name, "namespace": namespace}}
    put(cp, {**role, "rules": [POD_RIGHTS]})
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject],
    }
    put(cp, binding)


def pod(
    containers: dict[str, dict[str, Any]] | None = None,
    init: dict[str, dict[str, Any]] | None = None,
    name: str = "",
) -> dict[str, Any]:
    """A pod whose containers (name → resources) request what they are given."""

    def spec(name: str, resources: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "image": "registry.example/app:1", "resources": resources}

    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name or f"p-{uid()}"},
        "spec": {
            "containers": [spec(n, r) for n, r in (containers or {"main": {}}).items()],
        },
    }
    if init:
        body["spec"]["initContainers"] = [spec(n, r) for n, r in init.items()]
    return body


def slot_limits(*names: str) -> dict[str, Any]:
    """Resources of a virt-launcher's compute container: a limit per slot, cpu, memory."""
    return {"limits": {"cpu": "1", "memory": "1Gi", **dict.fromkeys(names, "1")}}


def refused_by_policy(status: int, body: dict[str, Any]) -> bool:
    return status == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in body.get("message", "")


def poll(probe: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Whether probe came true within timeout seconds."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="module")
def setup(control_plane: ControlPlane) -> Setup:
    cp = control_plane
    # The class policy's parameters are GPUClasses: their kind must be served.
    cp.install_crds([DEPLOY / "crds"])
    install(cp, "slot-resource-policy.yaml")
    namespace = f"slots-{uid()}"
    put(cp, {"kind": "Namespace", "metadata": {"name": namespace}})
    tenant = cp.add_user(f"tenant-{uid()}", ["tenants"])
    grant_pods(cp, namespace, {"kind": "User", "name": tenant.name})
    token = account_token(cp, KUBEVIRT, CONTROLLER)
    grant_pods(cp, namespace, {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": KUBEVIRT})
    tenant_client, controller = Client(cp, tenant), Client(cp, token=token)
    # RBAC and the policy take effect a moment after they are stored; dry runs go through
    # admission too, and store nothing. Without the policy the tests below fail, and say so.
    dry = f"/api/v1/namespaces/{namespace}/pods?dryRun=All"
    for who, client in (("the tenant", tenant_client), ("virt-controller", controller)):
        assert poll(lambda c=client: c.request("POST", dry, pod())[0] == 201), (
            f"{who} never got the right to create pods"
        )
    probe = pod({"c": slot_limits(SLOT)})
    enforced = poll(lambda: refused_by_policy(*tenant_client.request("POST", dry, probe)))
    return Setup(cp, namespace, tenant_client, controller, enforced)


def stored(s: Setup, name: str) -> int:
    return s.cp.request("GET", f"{s.pods}/{name}").status


def test_a_tenants_pod_requesting_a_slot_is_refused_with_the_reason(setup: Setup) -> None:
    s = setup
    wanted = pod({"compute": slot_limits(SLOT)})
    status, body = s.tenant.request("POST", s.pods, wanted)
    assert refused_by_policy(status, body), (status, body)
    assert body["reason"] == "Forbidden"
    assert f"the pod requests {SLOT}: {WHY}" in body["message"]
    assert stored(s, wanted["metadata"]["name"]) == 404


def test_the_same_pod_from_kubevirts_virt_controller_is_admitted(setup: Setup) -> None:
    s = setup
    assert s.enforced, f"{POLICY} is not in force: an admission would prove nothing"
    wanted = pod({"compute": slot_limits(SLOT)})
    status, body = s.controller.request("POST", s.pods, wanted)
    assert status == 201, body
    assert body["spec"]["containers"][0]["resources"]["requests"][SLOT] == "1"
    assert stored(s, wanted["metadata"]["name"]) == 200


def test_a_tenants_pod_without_such_resources_is_admitted(setup: Setup) -> None:
    s = setup
    assert s.enforced, f"{POLICY} is not in force: an admission would prove nothing"
    others = {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}
    wanted = pod({"main": others}, init={"setup": {"limits": {"cpu": "1"}}})
    status, body = s.tenant.request("POST", s.pods, wanted)
    assert status == 201, body


@pytest.mark.parametrize(
    ("containers", "init", "named"),
    [
        # An init container holds the device for the pod's whole life just as well.
        ({"main": {}}, {"grab": slot_limits(SLOT)}, SLOT),
        # Requests and limits alike (an extended resource needs both equal, or a limit).
        (
            {"main": {}, "b": {"requests": {SLOT: "1"}, "limits": {SLOT: "1"}}},
            None,
            SLOT,
        ),
        # Any name of the group, not only a slot of a GPU the agent serves now.
        ({"main": {"limits": {"gpu.cozystack.io/h100": "2"}}}, None, "gpu.cozystack.io/h100"),
        (
            {"a": slot_limits(SLOT), "b": slot_limits("gpu.cozystack.io/10de-2330-s4")},
            None,
            f"{SLOT}, gpu.cozystack.io/10de-2330-s4",
        ),
    ],
)
def test_every_container_and_init_container_is_checked(
    setup: Setup,
    containers: dict[str, dict[str, Any]],
    init: dict[str, dict[str, Any]] | None,
    named: str,
) -> None:
    s = setup
    status, body = s.tenant.request("POST", s.pods, pod(containers, init))
    assert refused_by_policy(status, body), (status, body)
    assert f"the pod requests {named}: {WHY}" in body["message"]


def test_an_account_named_like_virt_controller_elsewhere_is_refused(setup: Setup) -> None:
    """A tenant's own ServiceAccount kubevirt-controller is not KubeVirt's."""
    s = setup
    token = account_token(s.cp, s.namespace, CONTROLLER)
    grant_pods(
        s.cp, s.namespace, {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": s.namespace}
    )
    impostor = Client(s.cp, token=token)
    dry = f"{s.pods}?dryRun=All"
    assert poll(lambda: impostor.request("POST", dry, pod())[0] == 201)
    status, body = impostor.request("POST", s.pods, pod({"compute": slot_limits(SLOT)}))
    assert refused_by_policy(status, body), (status, body)


def test_an_admitted_pod_cannot_be_changed_to_request_a_slot(setup: Setup) -> None:
    """Why the policy checks CREATE only: the API server refuses the change itself, by an
    update and by an in-place resize (which changes cpu and memory only)."""
    s = setup
    status, created = s.tenant.request("POST", s.pods, pod({"main": slot_limits()}))
    assert status == 201, created
    path = f"{s.pods}/{created['metadata']['name']}"
    changed = json.loads(json.dumps(created))
    resources = changed["spec"]["containers"][0]["resources"]
    resources["limits"][SLOT] = resources["requests"][SLOT] = "1"
    status, body = s.tenant.request("PUT", path, changed)
    assert status == 422, body
    status, body = s.tenant.request("PUT", f"{path}/resize", changed)
    assert status == 422 and "only cpu and memory resources are mutable" in body["message"]
    now = s.cp.request("GET", path).json()["spec"]["containers"][0]["resources"]
    assert SLOT not in now["limits"]


# --- every class's resourceName (issue 11 item 8) ------------------------------------------

CLASS_POLICY = "gpu-binder-class-resources"


def gpu_class(cp: ControlPlane, pinning: str) -> tuple[str, str]:
    """A GPUClass of this test alone: (its name, its resourceName)."""
    name = f"c-{uid()}"
    resource = f"example.com/GPU_{name.replace('-', '_')}"
    body = {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name},
        # It matches no GPU: other tests' devices must not match two classes.
        "spec": {
            "resourceName": resource,
            "pinning": pinning,
            "match": {"vendorID": "0x10de", "deviceIDs": ["0xfffe"]},
        },
    }
    answer = cp.request("POST", "/apis/gpu.cozystack.io/v1alpha1/gpuclasses", body)
    assert answer.status == 201, answer.body
    return name, resource


def refused_for_class(status: int, body: dict[str, Any]) -> bool:
    return status == 403 and f"ValidatingAdmissionPolicy '{CLASS_POLICY}'" in body.get(
        "message", ""
    )


def resource_limits(name: str) -> dict[str, Any]:
    return {"limits": {"cpu": "1", "memory": "1Gi", name: "1"}}


@pytest.mark.parametrize("pinning", ["Node", "Device"])
def test_a_tenants_pod_requesting_a_classs_resource_name_is_refused(
    setup: Setup, pinning: str
) -> None:
    s = setup
    name, resource = gpu_class(s.cp, pinning)
    wanted = pod({"compute": resource_limits(resource)})
    # A new class reaches the policy through the API server's informer: a moment.
    dry = f"{s.pods}?dryRun=All"
    assert poll(lambda: refused_for_class(*s.tenant.request("POST", dry, wanted)))
    status, body = s.tenant.request("POST", s.pods, wanted)
    assert refused_for_class(status, body), (status, body)
    assert f"the pod requests {resource}, the resourceName of GPUClass {name}" in body["message"]
    assert stored(s, wanted["metadata"]["name"]) == 404


def test_a_pod_naming_a_classs_resource_name_in_an_init_container_or_request_is_refused(
    setup: Setup,
) -> None:
    s = setup
    _, resource = gpu_class(s.cp, "Node")
    dry = f"{s.pods}?dryRun=All"
    probe = pod({"compute": resource_limits(resource)})
    assert poll(lambda: refused_for_class(*s.tenant.request("POST", dry, probe)))
    for wanted in (
        pod({"main": {}}, init={"grab": resource_limits(resource)}),
        pod({"main": {"requests": {resource: "1"}, "limits": {resource: "1"}}}),
    ):
        assert refused_for_class(*s.tenant.request("POST", s.pods, wanted))


def test_virt_controller_creates_pods_naming_a_classs_resource_name(setup: Setup) -> None:
    s = setup
    _, resource = gpu_class(s.cp, "Node")
    dry = f"{s.pods}?dryRun=All"
    probe = pod({"compute": resource_limits(resource)})
    assert poll(lambda: refused_for_class(*s.tenant.request("POST", dry, probe))), (
        f"{CLASS_POLICY} is not in force: an admission would prove nothing"
    )
    status, body = s.controller.request("POST", s.pods, pod({"compute": resource_limits(resource)}))
    assert status == 201, body


def test_a_deleted_class_no_longer_refuses_its_resource_name(setup: Setup) -> None:
    s = setup
    name, resource = gpu_class(s.cp, "Node")
    dry = f"{s.pods}?dryRun=All"
    probe = pod({"compute": resource_limits(resource)})
    assert poll(lambda: refused_for_class(*s.tenant.request("POST", dry, probe)))
    s.cp.request("DELETE", f"/apis/gpu.cozystack.io/v1alpha1/gpuclasses/{name}")
    assert poll(lambda: s.tenant.request("POST", dry, probe)[0] == 201)


# --- the chart's settings ------------------------------------------------------------------


def slot_policy(docs: list[dict[str, Any]], name: str = POLICY) -> dict[str, Any] | None:
    return by_key(docs).get(("ValidatingAdmissionPolicy", name))


@pytest.mark.parametrize(
    ("values", "user"),
    [
        ({}, CONTROLLER_USER),
        # The namespace of the binder's KubeVirt settings, when set, is KubeVirt's.
        (
            {"binder": {"config": {"kubevirtNamespace": "cozy-kubevirt"}}},
            "system:serviceaccount:cozy-kubevirt:kubevirt-controller",
        ),
        (
            {
                "binder": {"config": {"kubevirtNamespace": "cozy-kubevirt"}},
                "slotResourcePolicy": {
                    "kubevirtNamespace": "virt",
                    "controllerServiceAccount": "virt-controller",
                },
            },
            "system:serviceaccount:virt:virt-controller",
        ),
        ({"binder": {"config": None}}, CONTROLLER_USER),
    ],
)
def test_the_chart_lets_the_configured_virt_controller_through(
    helm: Path, tmp_path: Path, values: dict[str, Any], user: str
) -> None:
    docs = render(helm, values=values, tmp=tmp_path)
    policy = slot_policy(docs)
    assert policy is not None
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username != '{user}'"
    (validation,) = policy["spec"]["validations"]
    assert f"({user})" in validation["message"]
    assert f"({user})" in validation["messageExpression"]
    binding = by_key(docs)[("ValidatingAdmissionPolicyBinding", POLICY)]
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
    classes = slot_policy(docs, CLASS_POLICY)
    assert classes is not None
    not_kubevirt, _ = classes["spec"]["matchConditions"]
    assert not_kubevirt["expression"] == f"request.userInfo.username != '{user}'"
    assert f"({user})" in classes["spec"]["validations"][0]["messageExpression"]
    binding = by_key(docs)[("ValidatingAdmissionPolicyBinding", CLASS_POLICY)]
    assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}


def test_the_chart_keeps_the_policy_without_the_agent_and_drops_it_when_told(
    helm: Path, tmp_path: Path
) -> None:
    # Another agent deployment may serve the slots: the policy does not depend on ours.
    docs = render(helm, values={"agent": {"enabled": False}}, tmp=tmp_path)
    assert slot_policy(docs) is not None
    assert slot_policy(docs, "gpu-binder-agent-own-node") is None
    docs = render(helm, values={"slotResourcePolicy": {"enabled": False}}, tmp=tmp_path)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for name in (POLICY, CLASS_POLICY):
        assert ("ValidatingAdmissionPolicy", name) not in kinds
        assert ("ValidatingAdmissionPolicyBinding", name) not in kinds
