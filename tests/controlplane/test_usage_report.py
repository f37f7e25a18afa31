"""`gpu-binder usage` bills the GPUUsageRecords stored in a real kube-apiserver."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from realcluster import namespace, put

from gpu_binder.api.types import GPUUsageRecord, GPUUsageRecordSpec, VMRef
from gpu_binder.binder import ledger
from gpu_binder.binder.config import Config
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient

pytestmark = pytest.mark.controlplane

LEDGER = Config().ledger_namespace


def march(day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(2025, 3, day, hour, minute, tzinfo=UTC)


def usage_record(
    ns: str, name: str, class_name: str, start: datetime, end: datetime | None
) -> GPUUsageRecord:
    """A record of namespace ns's tenant, in the ledger, as the binder writes it."""
    spec = GPUUsageRecordSpec(
        namespace=ns,
        vm=f"vm-{class_name}",
        vmi=VMRef(name=f"vm-{class_name}", uid=f"uid-{name}"),
        device=f"node-a-0000-3b-00-{name[-1]}",
        class_name=class_name,
        node_name="node-a",
        start=start,
        end=end,
    )
    return ledger.record(LEDGER, f"{ns}-{name}", spec)


async def gpu_binder_usage(
    cp: ControlPlane, *argv: str, kubeconfig: Path | None = None
) -> tuple[int, str, str]:
    """The command as an operator (or a tenant) runs it: its own process, a kubeconfig."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpu_binder.cli.main",
        "usage",
        "--kubeconfig",
        str(kubeconfig or cp.kubeconfig),
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_months_records_are_billed_per_class_in_gpu_minutes(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns, other = namespace(control_plane, "bill"), namespace(control_plane, "bill")
    records = [
        # 6 h of it in March: it started in February.
        usage_record(ns, "r1", "h100", datetime(2025, 2, 28, 18, tzinfo=UTC), march(1, 6)),
        usage_record(ns, "r2", "l40s", march(10), march(10, 1, 30)),
        # Still open: it counts until the end of March, 4 h.
        usage_record(ns, "r3", "h100", march(31, 20), None),
        usage_record(ns, "r4", "h100", datetime(2025, 4, 2, tzinfo=UTC), None),
        usage_record(other, "r5", "h100", march(5), march(6)),
    ]
    for r in records:
        await admin.create(r)

    args = ["-n", ns, "--month", "2025-03", "--chunk-size", "2"]
    code, out, err = await gpu_binder_usage(control_plane, *args, "-o", "json")

    assert (code, err) == (0, "")
    doc: dict[str, Any] = json.loads(out)
    assert [(g["class"], g["records"], g["gpu_minutes"]) for g in doc["groups"]] == [
        ("h100", 2, 600.0),
        ("l40s", 1, 90.0),
    ]
    assert (doc["total"]["records"], doc["total"]["gpu_hours"]) == (3, 11.5)


async def test_a_tenant_bills_its_namespace_from_its_copies(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns = namespace(control_plane, "bill")
    rec = await admin.create(usage_record(ns, "r1", "h100", march(2), march(2, 3)))
    copy = ledger.copy_of(rec, LEDGER, None)
    assert copy is not None
    await admin.create(copy)
    tenant = control_plane.add_user(f"tenant-of-{ns}")
    put(
        control_plane,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reads-gpus", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "gpu-binder-tenant",
            },
            "subjects": [{"kind": "User", "name": tenant.name}],
        },
    )
    args = ["-n", ns, "--month", "2025-03", "-o", "json"]
    code, out, err = await gpu_binder_usage(control_plane, *args, kubeconfig=tenant.kubeconfig)
    assert code == 0, err
    assert f"reading the copies in namespace {ns}" in err
    assert json.loads(out)["total"]["gpu_hours"] == 3.0


async def test_nightly_exports_bill_each_second_once(
    control_plane: ControlPlane, admin: KubeClient, tmp_path: Path
) -> None:
    ns = namespace(control_plane, "bill")
    await admin.create(usage_record(ns, "r1", "h100", march(2), march(2, 3)))
    state = str(tmp_path / "export")
    first = ["-n", ns, "--since-last", state, "-o", "json"]
    code, out, err = await gpu_binder_usage(
        control_plane, *first, "--from", "2025-03-01", "--to", "2025-03-02T02:00:00Z"
    )
    assert code == 0, err
    assert json.loads(out)["total"]["gpu_hours"] == 2.0
    code, out, err = await gpu_binder_usage(control_plane, *first, "--to", "2025-03-03T00:00:00Z")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["from"], doc["total"]["gpu_hours"]) == ("2025-03-02T02:00:00Z", 1.0)


async def test_bad_input_exits_2_before_asking_the_apiserver(control_plane: ControlPlane) -> None:
    code, out, err = await gpu_binder_usage(
        control_plane, "--from", "2025-03-31", "--to", "2025-03-01"
    )
    assert (code, out) == (2, "")
    assert "--to (2025-03-01T00:00:00Z) must be after --from (2025-03-31T00:00:00Z)" in err
