"""bench start counts the GPUs its burst left without a usage record of either kind, and
prints KubeVirt alone beside gpu-binder and the baseline."""

from __future__ import annotations

from typing import Any, cast

import pytest

from binder.cluster import LEDGER, NAMESPACE, Cluster
from gpu_binder.api.types import GPUUsageRecord, RecordKind
from gpu_binder.bench import ledger
from gpu_binder.bench.starttable import table
from gpu_binder.client.errors import from_status
from gpu_binder.kube import KubeClient


async def started(cluster: Cluster) -> None:
    cluster.gpu_class()
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()


async def test_a_started_vms_gpus_each_have_both_records() -> None:
    cluster = Cluster()
    await started(cluster)
    found = await ledger.unrecorded(cast(KubeClient, cluster.client), NAMESPACE, LEDGER, 0)
    assert (found["gpus"], found["without_attached_record"], found["without_reserved_record"]) == (
        2,
        0,
        0,
    )


async def test_a_gpu_whose_reserved_record_is_missing_is_counted() -> None:
    cluster = Cluster()
    await started(cluster)
    reserved = [r for r in cluster.ledger() if r.spec.kind == RecordKind.RESERVED]
    await cluster.client.delete(GPUUsageRecord, reserved[0].metadata.name, LEDGER)
    found = await ledger.unrecorded(cast(KubeClient, cluster.client), NAMESPACE, LEDGER, 0)
    assert (found["without_attached_record"], found["without_reserved_record"]) == (0, 1)


def side(**extra: Any) -> dict[str, Any]:
    timing = {"p50_ms": 100.0, "p99_ms": 200.0, "samples": 10}
    return {
        "vmi_create_to_admitted": timing,
        "pod_create_to_scheduled": timing,
        "starts_per_s": 10.0,
        "not_scheduled": 0,
        "pods_not_on_their_sets_node": 0,
        "vmi_refused_then_retried": 0,
        "pods_refused_then_retried": 0,
        "api_requests_per_start": {"total": 7.0},
        **extra,
    }


def test_the_table_sets_kubevirt_alone_between_gpu_binder_and_the_baseline() -> None:
    figures = {
        "vms": 10,
        "gpus_per_vm": 2,
        "nodes": 5,
        "gpus_per_node": 8,
        "gpu_binder": side(ledger={"without_attached_record": 0, "without_reserved_record": 3}),
        "kubevirt_alone": side(),
        "baseline": side(),
        "throughput_ratio": 0.2,
        "kubevirt_alone_ratio": 0.4,
        "gpu_binder_to_kubevirt_alone": 0.5,
    }
    lines = table(figures).splitlines()
    assert lines[1].split() == ["gpu-binder", "KubeVirt", "alone", "baseline"]
    (unrecorded,) = [line for line in lines if line.startswith("GPUs without")]
    assert unrecorded.split()[-3:] == ["3", "-", "-"]
    assert "KubeVirt alone / baseline: 0.4" in lines[-1]


async def test_a_list_the_servers_cache_is_too_far_behind_for_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a burst on two cores the API server's watch cache can lag seconds behind etcd
    and answer a list 504 "Too large resource version"; the count waits it out."""
    cluster = Cluster()
    await started(cluster)
    real = cluster.client.list
    lagging = [from_status(504, "Timeout: Too large resource version: 49904, current: 49628")]

    async def list_(*args: Any, **kwargs: Any) -> Any:
        if lagging:
            raise lagging.pop()
        return await real(*args, **kwargs)

    monkeypatch.setattr(cluster.client, "list", list_)
    found = await ledger.unrecorded(cast(KubeClient, cluster.client), NAMESPACE, LEDGER, 60)
    assert found["gpus"] == 2 and not lagging
