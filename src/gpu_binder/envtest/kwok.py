"""KWOK for the control plane: simulated nodes that the real scheduler places pods on.

``kwok`` (sigs.k8s.io/kwok, built by ``scripts/build-controlplane.sh --node``) manages
the Node objects annotated ``kwok.x-k8s.io/node: fake``: it keeps them heartbeating
through their leases (so the controller-manager's node lifecycle leaves them Ready) and
plays their pods' lifecycle (scheduled → Running, deleted → gone). The stages it plays
are the ones kwokctl gives it by default, copied beside the binary by the build script.

A simulated node is made by creating a Node with that annotation and writing its status
(capacity and allocatable, including the slot resources an agent's device plugin would
serve); kwok keeps what the status says and adds conditions and addresses.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .process import LOOPBACK, Process, free_port, launch, start_ready

__all__ = ["KWOK_ANNOTATION", "kwok_node", "start_kwok"]

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, ssl.SSLError):
        return False


# kwokctl's defaults, which the standalone binary does not fill in by itself.
OPTIONS = {
    "nodeLeaseParallelism": 4,
    "nodePlayStageParallelism": 4,
    "podPlayStageParallelism": 4,
    "podsOnNodeSyncParallelism": 1,
    # Leases, as kubelets keep them: the node lifecycle controller reads them.
    "nodeLeaseDurationSeconds": 40,
}


def _config(stages: Path, out: Path) -> Path:
    options = json.dumps(OPTIONS)
    docs = [
        f"apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions: {options}\n",
        *(f.read_text() for f in sorted(stages.glob("*.yaml"))),
    ]
    out.write_text("\n---\n".join(docs))
    return out


def start_kwok(
    binary: Path,
    work: Path,
    kubeconfig: Path,
    flags: Mapping[str, str | None] | None = None,
    timeout: float = 60.0,
) -> Process:
    """Start kwok for the nodes annotated ``kwok.x-k8s.io/node=fake``; return once its
    /healthz answers. The stages come from ``kwok-stages/`` beside the binary."""
    stages = binary.parent / "kwok-stages"
    if not stages.is_dir():
        raise FileNotFoundError(f"{stages} is missing; rebuild with build-controlplane.sh --node")
    config = _config(stages, work / "kwok.yaml")

    def start() -> tuple[Process, Callable[[], bool]]:
        port = free_port()
        defaults: dict[str, str | None] = {
            "kubeconfig": str(kubeconfig),
            "config": str(config),
            "manage-all-nodes": "false",
            "manage-nodes-with-annotation-selector": f"{KWOK_ANNOTATION}=fake",
            "server-address": f"{LOOPBACK}:{port}",
            "node-ip": LOOPBACK,
        }
        proc = launch("kwok", binary, work, defaults, flags or {})
        return proc, functools.partial(_http_ok, f"http://{LOOPBACK}:{port}/healthz")

    return start_ready(start, "kwok /healthz", timeout)


def kwok_node(
    name: str,
    allocatable: Mapping[str, str | int],
    labels: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A simulated Node (metadata and spec) and the status to write to it: capacity and
    allocatable as given (cpu, memory, pods and extended resources)."""
    resources = {k: str(v) for k, v in allocatable.items()}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {},
    }
    status = {"status": {"capacity": resources, "allocatable": resources}}
    return node, status
