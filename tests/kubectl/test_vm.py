"""`kubectl gpu vm NS/NAME`: the set, the node, each GPU's phase, and the decisions."""

from __future__ import annotations

import json

from binder.cluster import Cluster, gpu_name

from .conftest import kubectl


async def test_it_shows_the_order_the_set_its_node_and_each_gpus_phase(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.vm("train", 2, running=True)
    await cluster.settle()
    cluster.start("train")
    await cluster.settle()
    ran = await kubectl(cluster, "vm", "tenant/train")
    assert ran.code == 0, ran.err
    head = ran.out.split("\n\n")[0].splitlines()
    assert head == [
        "VM       tenant/train: running",
        "VMI      Running on node-a",
        "Orders   2 × h100",
        "Set      2 GPU(s) on node-a",
    ]
    rows = [line.split() for line in ran.out.splitlines() if line.startswith("node-a-")]
    assert [(r[0], r[4]) for r in rows] == [
        (gpu_name("node-a", 0), "Attached"),
        (gpu_name("node-a", 1), "Attached"),
    ]


async def test_its_history_lists_the_binders_events_newest_last(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-b", 2)
    cluster.vm("vm", 2)
    await cluster.settle()
    cluster.clock.advance(minutes=3)
    cluster.cordon(cluster.node_of("vm"))
    await cluster.settle()
    data = json.loads((await kubectl(cluster, "vm", "vm", "-o", "json")).out)
    # The move binds on the target first, then releases the old devices.
    assert [e["reason"] for e in data["events"]] == ["GPUOrder", "GPUMove", "GPUReleased"]
    ran = await kubectl(cluster, "vm", "vm")
    history = ran.out.split("History (Events, newest last):\n")[1].splitlines()
    assert history[0].split()[:3] == ["AGE", "TYPE", "REASON"]
    assert history[1].split()[:3] == ["3m", "Normal", "GPUOrder"]
    assert history[2].split()[:3] == ["0s", "Normal", "GPUMove"]


async def test_a_vm_that_is_not_there_is_an_error(cluster: Cluster) -> None:
    ran = await kubectl(cluster, "vm", "tenant/nope")
    assert ran.code == 1
    assert ran.err == 'kubectl gpu: virtualmachines.kubevirt.io "nope" not found in tenant\n'


async def test_name_alone_is_looked_up_in_the_namespace_of_n(cluster: Cluster) -> None:
    cluster.node("node-a", 1)
    cluster.vm("vm", 1)
    await cluster.settle()
    data = json.loads((await kubectl(cluster, "vm", "vm", "-o", "json")).out)
    assert data["vm"] == "tenant/vm" and data["node"] == "node-a"
    assert data["devices"][0]["phase"] == "Bound"


async def test_an_instancetype_vm_shows_the_gpus_of_its_recorded_instancetype(
    cluster: Cluster,
) -> None:
    """The order is read as the binder reads it: the template names no GPUs, the
    instancetype KubeVirt recorded for the VM does."""
    cluster.node("node-a", 4)
    cluster.instancetype_vm("infer", "gpu-large", 2, running=False)
    await cluster.settle()
    ran = await kubectl(cluster, "vm", "tenant/infer")
    assert ran.code == 0, ran.err
    assert "Orders   2 × h100" in ran.out.splitlines()
