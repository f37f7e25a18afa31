"""A closed usage record is never labelled open again (deploy/binder/usage-record-policy.yaml).

The binder caches only records labelled gpu.cozystack.io/record-state=open; a CRD's CEL
rules cannot read labels, so a ValidatingAdmissionPolicy holds the label of a closed one.
The binder's own writes (open labelled open, close labelled closed) pass it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from realcluster import DEPLOY, install, namespace, uid

from gpu_binder.api.types import RECORD_CLOSED, RECORD_OPEN, RECORD_STATE_LABEL
from gpu_binder.envtest import ControlPlane

pytestmark = pytest.mark.controlplane

POLICY = "gpu-binder-usage-records"
API = "/apis/gpu.cozystack.io/v1alpha1"


def record(state: str, end: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "vm": "vm",
        "vmi": {"name": "vm", "uid": "u1"},
        "device": "node-a-0000-3b-00-0",
        "start": "2026-01-01T00:00:00Z",
    }
    if end:
        spec["end"] = end
    return {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUUsageRecord",
        "metadata": {"name": f"r-{uid()}", "labels": {RECORD_STATE_LABEL: state}},
        "spec": spec,
    }


def refused(answer: Any) -> bool:
    return answer.status == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in answer.body.decode()


@pytest.fixture(scope="module")
def records(control_plane: ControlPlane) -> str:
    cp = control_plane
    cp.install_crds([DEPLOY / "crds"])
    install(cp, DEPLOY / "binder" / "usage-record-policy.yaml")
    ns = namespace(cp)
    path = f"{API}/namespaces/{ns}/gpuusagerecords"
    # A policy takes effect a moment after it is stored: wait until a dry run is refused.
    probe = record(RECORD_OPEN, end="2026-01-01T01:00:00Z")
    deadline = time.monotonic() + 30
    while not refused(cp.request("POST", f"{path}?dryRun=All", probe)):
        assert time.monotonic() < deadline, f"{POLICY} never took effect"
        time.sleep(0.1)
    return path


def test_a_closed_record_relabelled_open_is_refused(
    control_plane: ControlPlane, records: str
) -> None:
    cp = control_plane
    closed = cp.request("POST", records, record(RECORD_CLOSED, end="2026-01-01T01:00:00Z"))
    assert closed.status == 201, closed.body
    body = closed.json()
    body["metadata"]["labels"][RECORD_STATE_LABEL] = RECORD_OPEN

    answer = cp.request("PUT", f"{records}/{body['metadata']['name']}", body)

    assert refused(answer), answer.body
    assert "never labelled gpu.cozystack.io/record-state=open" in answer.body.decode()


def test_a_closed_record_keeps_its_closed_label(control_plane: ControlPlane, records: str) -> None:
    cp = control_plane
    closed = cp.request("POST", records, record(RECORD_CLOSED, end="2026-01-01T01:00:00Z"))
    body = closed.json()
    del body["metadata"]["labels"][RECORD_STATE_LABEL]

    answer = cp.request("PUT", f"{records}/{body['metadata']['name']}", body)

    assert refused(answer), answer.body


def test_a_record_with_an_end_is_not_created_labelled_open(
    control_plane: ControlPlane, records: str
) -> None:
    answer = control_plane.request("POST", records, record(RECORD_OPEN, end="2026-01-01T01:00:00Z"))
    assert refused(answer), answer.body


def test_the_binders_writes_pass_an_open_record_opened_then_closed(
    control_plane: ControlPlane, records: str
) -> None:
    cp = control_plane
    opened = cp.request("POST", records, record(RECORD_OPEN))
    assert opened.status == 201, opened.body
    body = opened.json()
    body["spec"]["end"] = "2026-01-01T01:00:00Z"
    body["metadata"]["labels"][RECORD_STATE_LABEL] = RECORD_CLOSED

    answer = cp.request("PUT", f"{records}/{body['metadata']['name']}", body)

    assert answer.status == 200, answer.body
