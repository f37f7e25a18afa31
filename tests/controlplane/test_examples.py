"""Every file of examples/ is accepted by a real API server with the CRDs this repository
ships (deploy/crds, and KubeVirt's stand-ins in deploy/kubevirt), as `kubectl apply
--server-side` would send it; and what is stored is what the file says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from realcluster import REPO

from conftest import BinderSetup
from gpu_binder.envtest import ControlPlane

pytestmark = pytest.mark.controlplane

EXAMPLES = REPO / "examples"
APPLY = "application/apply-patch+yaml"
# Where each kind lives: (API path prefix, plural, namespaced).
PLACES = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "GPUClass": ("/apis/gpu.cozystack.io/v1alpha1", "gpuclasses", False),
    "VirtualMachine": ("/apis/kubevirt.io/v1", "virtualmachines", True),
    "VirtualMachineClusterInstancetype": (
        "/apis/instancetype.kubevirt.io/v1beta1",
        "virtualmachineclusterinstancetypes",
        False,
    ),
}


def documents() -> list[tuple[Path, dict[str, Any]]]:
    docs = [
        (f, d) for f in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())
    ]
    # The namespace first, as `kubectl apply -f examples/` must be told to do.
    return sorted(docs, key=lambda fd: fd[1]["kind"] != "Namespace")


def url(doc: dict[str, Any]) -> str:
    prefix, plural, namespaced = PLACES[doc["kind"]]
    meta = doc["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    return f"{prefix}{where}/{plural}/{meta['name']}"


def contains(stored: Any, written: Any) -> bool:
    """Whether every field written is stored with that value (defaults may be added)."""
    if isinstance(written, dict):
        return isinstance(stored, dict) and all(
            contains(stored.get(k), v) for k, v in written.items()
        )
    if isinstance(written, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(written)
            and all(contains(s, w) for s, w in zip(stored, written, strict=True))
        )
    return bool(stored == written)


def test_there_is_an_example_of_each_thing_the_docs_promise() -> None:
    kinds = [d["kind"] for _, d in documents()]
    assert kinds.count("GPUClass") == 2
    assert {"VirtualMachine", "VirtualMachineClusterInstancetype", "ResourceQuota"} <= set(kinds)
    assert all(f.name in (EXAMPLES / "README.md").read_text() for f, _ in documents())


def test_every_example_is_accepted_as_written(binder_setup: BinderSetup) -> None:
    cp: ControlPlane = binder_setup.cp
    applied = []
    try:
        for file, doc in documents():
            answer = cp.request(
                "PATCH", f"{url(doc)}?fieldManager=examples&force=true", doc, content_type=APPLY
            )
            assert answer.ok, f"{file.name}: {answer.body.decode()[:800]}"
            applied.append(doc)
            stored = cp.request("GET", url(doc)).json()
            assert contains(stored.get("spec"), doc.get("spec", {})), file.name
    finally:
        # The session's other tests make GPUs of their own device ids; these classes go,
        # so no binder there ever classifies one as h100 or l40s.
        for doc in reversed(applied):
            if doc["kind"] != "Namespace":
                cp.request("DELETE", url(doc))
