"""Building blocks of the real-node tier: gpu-binder's processes, the agent's identity on a
real node, GPU fixture hosts with device nodes, and waiting for the API.

The binder and the agent run as processes (``gpu-binder run`` / ``gpu-binder agent``), as
in a cluster, so a fault test can kill one with SIGKILL and start it again.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from fake_sysfs import FakeHost, hgx_h100
from nodeagent import token_kubeconfig
from realcluster import BINDER_SA, DEPLOY, PATHS, put, uid

from gpu_binder.envtest import ControlPlane, NodeAssets
from gpu_binder.envtest.image import TEST_IMAGE
from gpu_binder.envtest.node import KubeletNode
from gpu_binder.envtest.process import Process, free_port
from gpu_binder.sim import builders

X = TypeVar("X")
GPU_BINDER = [sys.executable, "-m", "gpu_binder.cli.main"]
AGENT_NAMESPACE = "gpu-binder"
AGENT_SA = "gpu-binder-agent"
SCHEDULABLE = "kubevirt.io/schedulable"
H100_RESOURCE = "nvidia.com/H100"
H100_DEVICE_ID = "0x2330"


def wait_for(probe: Callable[[], X | None], timeout: float = 30.0, what: str = "condition") -> X:
    """The first truthy result of probe, polled; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    last: X | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout:g}s (last: {last!r})")


def gone(cp: ControlPlane, path: str, timeout: float = 30.0, what: str = "") -> None:
    """Wait until path is 404; the failure shows the object as it last was."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        last = get(cp, path)
        if last is None:
            return
        time.sleep(0.1)
    shown = {"metadata": (last or {}).get("metadata"), "status": (last or {}).get("status")}
    raise AssertionError(f"{what or path} not gone in {timeout:g}s: {shown}")


def request(cp: ControlPlane, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    """cp.request, again while the API server is (re)starting: a fault test's restart
    answers 429 "storage is (re)initializing" or refuses connections for a moment."""
    deadline = time.monotonic() + 30
    while True:
        try:
            resp = cp.request(method, path, body, **kw)
        except OSError:
            if time.monotonic() > deadline:
                raise
        else:
            if resp.status not in (429, 503) or time.monotonic() > deadline:
                return resp
        time.sleep(0.5)


def get(cp: ControlPlane, path: str) -> dict[str, Any] | None:
    resp = request(cp, "GET", path)
    if resp.status == 404:
        return None
    assert resp.ok, resp.body
    out: dict[str, Any] = resp.json()
    return out


def create(cp: ControlPlane, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    resp = request(cp, "POST", path, obj)
    assert resp.ok, resp.body
    out: dict[str, Any] = resp.json()
    return out


def merge_patch(cp: ControlPlane, path: str, patch: dict[str, Any]) -> dict[str, Any]:
    resp = request(cp, "PATCH", path, patch, content_type="application/merge-patch+json")
    assert resp.ok, resp.body
    out: dict[str, Any] = resp.json()
    return out


def delete(cp: ControlPlane, path: str) -> None:
    resp = request(cp, "DELETE", path)
    assert resp.ok or resp.status == 404, resp.body


# --- the GPU host -------------------------------------------------------------------------


def with_device_nodes(host: FakeHost) -> FakeHost:
    """Make the fixture's /dev/vfio entries character devices, as the runtime needs the
    host paths Allocate names to be (it copies their major:minor into the container).
    They are 1:3, /dev/null's numbers: harmless to open, nothing behind them."""
    vfio = host.root / "dev" / "vfio"
    for entry in vfio.iterdir():
        if not entry.is_char_device():
            entry.unlink()
            os.mknod(entry, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return host


def h100_host(root: Path) -> FakeHost:
    """An HGX H100 board's sysfs (8 GPUs, tests/agent/fake_sysfs.py) with device nodes."""
    return with_device_nodes(hgx_h100(root))


# --- gpu-binder's processes ------------------------------------------------------------------


@dataclass
class Webhook:
    """Where the MutatingWebhookConfiguration sends VMIs: one port, a serving cert."""

    port: int
    cert_file: Path
    key_file: Path


@dataclass
class BinderProcess:
    """`gpu-binder run` as the binder's ServiceAccount, with its webhook on port."""

    cp: ControlPlane
    work: Path
    webhook: Webhook
    identity: str = field(default_factory=lambda: f"binder-{uid()}")
    lease: str = "gpu-binder"
    process: Process | None = None

    def start(self) -> BinderProcess:
        user, groups = BINDER_SA
        log = self.work / "logs" / f"{self.identity}.log"
        self.process = Process(self.identity, log)
        self.process.start(
            [
                *GPU_BINDER,
                "run",
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--as={user}",
                f"--as-group={','.join(groups)}",
                f"--identity={self.identity}",
                f"--lease-name={self.lease}",
                "--lease-duration=4s",
                "--renew-deadline=3s",
                "--retry-period=0.5s",
                "--resync=2s",
                "--webhook-host=127.0.0.1",
                f"--webhook-port={self.webhook.port}",
                f"--tls-cert-file={self.webhook.cert_file}",
                f"--tls-key-file={self.webhook.key_file}",
                "--metrics-port=0",
                "--log-format=text",
            ]
        )
        return self

    def kill(self) -> None:
        """SIGKILL: no lease released, no request finished (a crashed pod)."""
        if self.process is not None and self.process.proc is not None:
            self.process.proc.kill()
            self.process.proc.wait()
            self.process.proc = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def log(self) -> str:
        return self.process.tail(60) if self.process else ""


@dataclass
class AgentProcess:
    """`gpu-binder agent` on a real node, as its DaemonSet pod would run it."""

    node: KubeletNode
    host: FakeHost
    kubeconfig: Path
    process: Process | None = None

    def start(self) -> AgentProcess:
        log = self.node.work / "logs" / "agent.log"
        self.process = Process("agent", log)
        self.process.start(
            [
                *GPU_BINDER,
                "agent",
                f"--root={self.host.root}",
                f"--host-vfio-dir={self.host.root / 'dev' / 'vfio'}",
                f"--node={self.node.name}",
                f"--device-plugin-dir={self.node.device_plugin_dir}",
                f"--kubeconfig={self.kubeconfig}",
                "--interval=1s",
            ]
        )
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.proc is not None:
            self.process.proc.kill()
            self.process.proc.wait()
            self.process.proc = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def log(self) -> str:
        return self.process.tail(60) if self.process else ""


def agent_kubeconfig(cp: ControlPlane, node: KubeletNode, path: Path) -> Path:
    """A kubeconfig with a token of the agent's ServiceAccount bound to an agent pod that
    runs on node, as the DaemonSet's pod gets it (the API server puts the node's name in
    the token, which the agent's admission policy checks)."""
    pods = f"/api/v1/namespaces/{AGENT_NAMESPACE}/pods"
    pod = create(
        cp,
        pods,
        {
            "metadata": {"name": f"agent-{node.name}"},
            "spec": {
                "nodeName": node.name,
                "serviceAccountName": AGENT_SA,
                "automountServiceAccountToken": False,
                "hostNetwork": True,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {"name": "agent", "image": TEST_IMAGE, "command": ["/bin/sleep", "86400"]}
                ],
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
            "expirationSeconds": 86400,
        },
    }
    path_ = f"/api/v1/namespaces/{AGENT_NAMESPACE}/serviceaccounts/{AGENT_SA}/token"
    token = create(cp, path_, request)["status"]["token"]
    return token_kubeconfig(cp, token, path)


def install(cp: ControlPlane, file: Path) -> None:
    """Create every document of a manifest (the tier's control plane starts empty)."""
    for doc in yaml.safe_load_all(file.read_text()):
        if doc:
            (put if doc["kind"] in PATHS else put_any)(cp, doc)


_OTHER = {
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
}


def put_any(cp: ControlPlane, doc: dict[str, Any]) -> dict[str, Any]:
    path = _OTHER[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
    resp = cp.request("POST", path, doc)
    assert resp.ok or resp.status == 409, resp.body
    return doc


def webhook_for(cp: ControlPlane, work: Path) -> Webhook:
    cert, key = cp.certs.ca.issue_serving("gpu-binder-webhook").write(work, "webhook")
    return Webhook(free_port(), cert, key)


@dataclass
class NodeTier:
    """The session's cluster: control plane, the real node, gpu-binder, one GPU class."""

    cp: ControlPlane
    assets: NodeAssets
    node: KubeletNode
    host: FakeHost
    agent: AgentProcess
    binder: BinderProcess
    webhook: Webhook
    work: Path
    class_name: str = "h100"
    resource: str = H100_RESOURCE

    def slot(self, n: int) -> str:
        return builders.slot_resource(n, H100_DEVICE_ID)

    def allocatable(self) -> dict[str, str]:
        node = get(self.cp, f"/api/v1/nodes/{self.node.name}") or {}
        return dict(node.get("status", {}).get("allocatable") or {})

    def served_slots(self) -> list[str]:
        return sorted(
            k
            for k, v in self.allocatable().items()
            if k.startswith("gpu.cozystack.io/") and v == "1"
        )


L40S_RESOURCE = "nvidia.com/L40S"
L40S_DEVICE_ID = "0x26b9"


@dataclass
class KwokNodes:
    """KWOK running for the session, and its GPU class (L40S, apart from the real node's)."""

    names: list[str]
    class_name: str = "l40s"
    resource: str = L40S_RESOURCE


DEPLOY_FILES = (
    DEPLOY / "ledger" / "ledger.yaml",
    DEPLOY / "binder" / "rbac.yaml",
    DEPLOY / "agent" / "rbac.yaml",
    DEPLOY / "agent" / "validating-admission-policy.yaml",
)
