"""The node agent's identity on a real API server: deploy/agent installed, and a
service-account token bound to a pod on a node, as the DaemonSet's pods get them.

The API server writes the pod's node into the token's user (extra
`authentication.kubernetes.io/node-name`), which the ValidatingAdmissionPolicy checks.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpu_binder.envtest import ControlPlane

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "deploy" / "agent"
NAMESPACE = "gpu-binder"
SERVICE_ACCOUNT = "gpu-binder-agent"
DEVICES = "/apis/gpu.cozystack.io/v1alpha1/gpudevices"
PATHS = {
    "Namespace": "/api/v1/namespaces",
    "Node": "/api/v1/nodes",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
    "FlowSchema": "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
    "PriorityLevelConfiguration": (
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations"
    ),
}


def collection(doc: dict[str, Any]) -> str:
    return PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))


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


def manifests(*files: str) -> list[dict[str, Any]]:
    """The documents of deploy/agent/<file>..., every file when none are named."""
    paths = [AGENT / f for f in files] if files else sorted(AGENT.glob("*.yaml"))
    return [doc for p in paths for doc in yaml.safe_load_all(p.read_text()) if doc]


def install(cp: ControlPlane, *files: str) -> None:
    for doc in manifests(*files):
        put(cp, collection(doc), doc)


def install_agent_rights(cp: ControlPlane) -> None:
    """The CRDs, the agent's namespace, ServiceAccount, RBAC and admission policy."""
    cp.install_crds([REPO / "deploy" / "crds"])
    install(cp, "rbac.yaml", "validating-admission-policy.yaml")


def bound_token(cp: ControlPlane, node: str) -> str:
    """A token of the agent's ServiceAccount, bound to an agent pod on node (both created)."""
    put(cp, PATHS["Node"], {"metadata": {"name": node}})
    pod = put(
        cp,
        PATHS["Pod"].format(ns=NAMESPACE),
        {
            "metadata": {"name": f"agent-{node}"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": SERVICE_ACCOUNT,
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
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
        request,
    )
    assert answer.status == 201, answer.body
    token: str = answer.json()["status"]["token"]
    return token


def token_kubeconfig(cp: ControlPlane, token: str, path: Path) -> Path:
    """A kubeconfig authenticating with token, as the agent's in-cluster config does."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": cp.url, "certificate-authority": str(cp.ca_file)},
            }
        ],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "agent", "context": {"cluster": "test", "user": "agent"}}],
        "current-context": "agent",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Agent:
    """Requests as the agent's service account, with a token bound to its pod on a node."""

    def __init__(self, cp: ControlPlane, node: str) -> None:
        self.cp = cp
        self.node = node
        self.token = bound_token(cp, node)
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

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig with this token, as the agent's in-cluster config would be."""
        return token_kubeconfig(self.cp, self.token, path)


def device(node: str, pci: str = "0000:18:00.0", **spec: Any) -> dict[str, Any]:
    """A GPUDevice as the agent on node would name and label it."""
    return {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUDevice",
        "metadata": {
            "name": f"{node}-{pci.replace(':', '-').replace('.', '-')}",
            "labels": {"gpu.cozystack.io/node": node},
        },
        "spec": {"nodeName": node, "pciAddress": pci, "deviceID": "0x2330", **spec},
    }


def policy_enforced(probe: Agent) -> bool:
    """Whether the admission policy refuses probe a GPUDevice of another node yet."""
    other = device(f"not-{probe.node}")
    return probe.request("POST", f"{DEVICES}?dryRun=All", other)[0] == 422


def wait_for_policy(denied: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until the API server has compiled the policy: `denied` probes a write it must refuse."""
    deadline = time.monotonic() + timeout
    while not denied():
        assert time.monotonic() < deadline, "the agent's admission policy never took effect"
        time.sleep(0.2)
