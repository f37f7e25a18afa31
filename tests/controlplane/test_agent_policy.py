"""The agent's RBAC and admission policy on a real API server: each agent writes the
GPUDevices of its own node only, as the node in its pod-bound token says."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_binder.envtest import ControlPlane

pytestmark = pytest.mark.controlplane

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "deploy" / "agent"
DEVICES = "/apis/gpu.cozystack.io/v1alpha1/gpudevices"
PATHS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
}


def put(cp: ControlPlane, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Create, or replace what a previous test left."""
    created = cp.request("POST", path, obj)
    if created.status == 409:
        name = obj["metadata"]["name"]
        current = cp.request("GET", f"{path}/{name}").json()
        obj = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        created = cp.request("PUT", f"{path}/{name}", obj)
    assert created.ok, created.body
    result: dict[str, Any] = created.json()
    return result


def install(cp: ControlPlane, *files: str) -> None:
    for file in files:
        for doc in yaml.safe_load_all((AGENT / file).read_text()):
            ns = doc["metadata"].get("namespace", "")
            put(cp, PATHS[doc["kind"]].format(ns=ns), doc)


class Agent:
    """Requests as the agent's service account, with a token bound to its pod on a node."""

    def __init__(self, cp: ControlPlane, node: str) -> None:
        self.cp = cp
        put(cp, "/api/v1/nodes", {"metadata": {"name": node}})
        pod = put(
            cp,
            "/api/v1/namespaces/gpu-binder/pods",
            {
                "metadata": {"name": f"agent-{node}"},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": "gpu-binder-agent",
                    "containers": [{"name": "agent", "image": "gpu-binder:test"}],
                },
            },
        )
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
                "expirationSeconds": 3600,
            },
        }
        answer = cp.request(
            "POST",
            "/api/v1/namespaces/gpu-binder/serviceaccounts/gpu-binder-agent/token",
            request,
        )
        assert answer.status == 201, answer.body
        self.token = answer.json()["status"]["token"]
        self.ssl = ssl.create_default_context(cafile=str(cp.ca_file))

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.cp.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


def device(node: str, pci: str = "0000:18:00.0", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUDevice",
        "metadata": {
            "name": f"{node}-{pci.replace(':', '-').replace('.', '-')}",
            "labels": {"gpu.cozystack.io/node": node},
        },
        "spec": {"nodeName": node, "pciAddress": pci, "deviceID": "0x2330", **spec},
    }


@pytest.fixture(scope="module")
def agents(control_plane: ControlPlane) -> tuple[Agent, Agent]:
    cp = control_plane
    cp.install_crds([REPO / "deploy" / "crds"])
    install(cp, "rbac.yaml", "validating-admission-policy.yaml")
    a, b = Agent(cp, "node-a"), Agent(cp, "node-b")
    # The policy takes effect once the API server has compiled it.
    deadline = time.monotonic() + 30
    while True:
        status, _ = a.request("POST", f"{DEVICES}?dryRun=All", device("node-b"))
        if status == 422 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return a, b


def test_an_agent_creates_updates_and_deletes_its_own_nodes_devices(
    agents: tuple[Agent, Agent],
) -> None:
    a, _ = agents
    status, created = a.request("POST", DEVICES, device("node-a", "0000:2a:00.0"))
    assert status == 201, created
    created["spec"]["health"] = "Unhealthy"
    created["spec"]["healthMessage"] = "bound to the nvidia driver"
    status, updated = a.request("PUT", f"{DEVICES}/{created['metadata']['name']}", created)
    assert status == 200, updated
    status, body = a.request("DELETE", f"{DEVICES}/{created['metadata']['name']}")
    assert status == 200, body


def test_an_agent_cannot_write_another_nodes_devices(agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    status, body = a.request("POST", DEVICES, device("node-b", "0000:3a:00.0"))
    assert status == 422
    assert (
        "the agent on node node-a may only write GPUDevices of its own node, and "
        "node-b-0000-3a-00-0 is on node node-b" in body["message"]
    )
    status, theirs = b.request("POST", DEVICES, device("node-b", "0000:3a:00.0"))
    assert status == 201, theirs
    theirs["spec"]["model"] = "taken over"
    assert a.request("PUT", f"{DEVICES}/node-b-0000-3a-00-0", theirs)[0] == 422
    assert a.request("DELETE", f"{DEVICES}/node-b-0000-3a-00-0")[0] == 422


def test_an_agent_keeps_its_hands_off_unschedulable_and_finalizers(
    agents: tuple[Agent, Agent], control_plane: ControlPlane
) -> None:
    a, _ = agents
    status, body = a.request("POST", DEVICES, device("node-a", "0000:5d:00.0", unschedulable=True))
    assert status == 422 and "unschedulable is the admin's" in body["message"]
    status, mine = a.request("POST", DEVICES, device("node-a", "0000:5d:00.0"))
    assert status == 201, mine
    name = mine["metadata"]["name"]
    mine["spec"]["unschedulable"] = True
    status, body = a.request("PUT", f"{DEVICES}/{name}", mine)
    assert status == 422 and "unschedulable is the admin's" in body["message"]
    # The binder adds its finalizer; the agent may not take it off.
    held = control_plane.request("GET", f"{DEVICES}/{name}").json()
    held["metadata"]["finalizers"] = ["gpu.cozystack.io/device"]
    assert control_plane.request("PUT", f"{DEVICES}/{name}", held).status == 200
    held = control_plane.request("GET", f"{DEVICES}/{name}").json()
    held["metadata"]["finalizers"] = []
    status, body = a.request("PUT", f"{DEVICES}/{name}", held)
    assert status == 422 and "finalizers of a GPUDevice are the binder's" in body["message"]


def test_an_agent_names_devices_by_node_and_address(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    wrong = device("node-a", "0000:9a:00.0")
    wrong["metadata"]["name"] = "node-a-some-gpu"
    status, body = a.request("POST", DEVICES, wrong)
    assert status == 422 and "is named <node>-<pci address" in body["message"]
    mislabelled = device("node-a", "0000:9a:00.0")
    mislabelled["metadata"]["labels"]["gpu.cozystack.io/node"] = "node-b"
    status, body = a.request("POST", DEVICES, mislabelled)
    assert status == 422 and "label must name the agent's node" in body["message"]


def test_the_agent_has_no_rights_beyond_its_own(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    assert a.request("GET", "/apis/gpu.cozystack.io/v1alpha1/gpuclasses")[0] == 200
    status, mine = a.request("POST", DEVICES, device("node-a", "0000:ab:00.0"))
    assert status == 201
    mine["status"] = {"phase": "Available"}
    assert a.request("PUT", f"{DEVICES}/{mine['metadata']['name']}/status", mine)[0] == 403
    cls = {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": "sneaky"},
        "spec": {"resourceName": "nvidia.com/sneaky"},
    }
    assert a.request("POST", "/apis/gpu.cozystack.io/v1alpha1/gpuclasses", cls)[0] == 403
    assert a.request("GET", "/api/v1/namespaces/gpu-binder/secrets")[0] == 403
