"""`gpu-binder usage` bills the GPUUsageRecords stored in a real kube-apiserver."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from realcluster import namespace

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUUsageRecord, GPUUsageRecordSpec, VMRef
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient

pytestmark = pytest.mark.controlplane


def march(day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(2025, 3, day, hour, minute, tzinfo=UTC)


def usage_record(
    ns: str, name: str, class_name: str, start: datetime, end: datetime | None
) -> GPUUsageRecord:
    return GPUUsageRecord(
        metadata=ObjectMeta(name=name, namespace=ns),
        spec=GPUUsageRecordSpec(
            vm=f"vm-{class_name}",
            vmi=VMRef(name=f"vm-{class_name}", uid=f"uid-{name}"),
            device=f"node-a-0000-3b-00-{name[-1]}",
            class_name=class_name,
            node_name="node-a",
            start=start,
            end=end,
        ),
    )


async def gpu_binder_usage(cp: ControlPlane, *argv: str) -> tuple[int, str, str]:
    """The command as an operator runs it: its own process, the apiserver's kubeconfig."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpu_binder.cli.main",
        "usage",
        "--kubeconfig",
        str(cp.kubeconfig),
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


async def test_bad_input_exits_2_before_asking_the_apiserver(control_plane: ControlPlane) -> None:
    code, out, err = await gpu_binder_usage(
        control_plane, "--from", "2025-03-31", "--to", "2025-03-01"
    )
    assert (code, out) == (2, "")
    assert "--to (2025-03-01T00:00:00Z) must be after --from (2025-03-31T00:00:00Z)" in err
