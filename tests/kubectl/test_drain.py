"""`kubectl gpu drain NODE`: which stopped sets move where (the binder's own pass on a copy
of the cluster), which running VMIs block the drain and why."""

from __future__ import annotations

import json
from typing import Any

from binder.cluster import Cluster
from gpu_binder.api.kubevirt import VirtualMachineInstance

from .conftest import kubectl


def with_eviction(cluster: Cluster, name: str, strategy: str) -> None:
    raw: dict[str, Any] = cluster.vmi(name).to_dict()
    raw["spec"]["evictionStrategy"] = strategy
    cluster.client.put(VirtualMachineInstance.from_dict(raw))


async def drain(cluster: Cluster, node: str) -> dict[str, Any]:
    ran = await kubectl(cluster, "drain", node, "-o", "json")
    assert ran.code == 0, ran.err
    found: dict[str, Any] = json.loads(ran.out)
    return found


async def test_stopped_sets_move_where_the_binder_would_put_them(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 2)
    cluster.node("node-c", 1)
    cluster.vm("pair", 2)
    cluster.vm("four", 4)
    await cluster.settle()
    assert cluster.node_of("four") == "node-a"
    plan = await drain(cluster, "node-a")
    assert plan["stoppedSets"] == [
        {"vm": "tenant/four", "gpus": 4, "to": None, "why": plan["stoppedSets"][0]["why"]},
    ] + [s for s in plan["stoppedSets"] if s["vm"] == "tenant/pair"]
    assert "4 × h100" in plan["stoppedSets"][0]["why"], "it stays: no node fits 4"
    assert cluster.node_of("four") == "node-a", "nothing was written"


async def test_a_running_vmi_blocks_the_drain_only_when_kubevirt_refuses_its_eviction(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 4)
    for name in ("kept", "evicted", "external"):
        cluster.vm(name, 1, running=True)
    await cluster.settle()
    for name in ("kept", "evicted", "external"):
        cluster.start(name)
    with_eviction(cluster, "kept", "LiveMigrate")
    with_eviction(cluster, "external", "External")
    await cluster.settle()
    plan = await drain(cluster, "node-a")
    running = {r["vmi"]: r for r in plan["runningVMIs"]}
    assert running["tenant/kept"]["blocksDrain"]
    assert "virtctl stop -n tenant kept" in running["tenant/kept"]["outcome"]
    assert running["tenant/external"]["blocksDrain"]
    assert not running["tenant/evicted"]["blocksDrain"]
    assert running["tenant/evicted"]["evictionStrategy"] == "None"
    assert "cannot live-migrate" in running["tenant/evicted"]["outcome"]
    assert plan["blocked"]
    ran = await kubectl(cluster, "drain", "node-a")
    assert ran.out.endswith("kubectl drain node-a blocks.\n")


async def test_a_node_without_gpu_vms_is_said_in_one_line(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    await cluster.settle()
    ran = await kubectl(cluster, "drain", "node-a")
    assert ran.out == "No GPU VM has GPUs on node-a: a drain disturbs none.\n"
