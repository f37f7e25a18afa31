"""`kubectl gpu status`: each class's counts, each node's slots by phase."""

from __future__ import annotations

import json

import yaml

from binder.cluster import Cluster, gpu_name

from .conftest import kubectl


async def a_cluster(cluster: Cluster) -> None:
    """node-a: a 2-GPU VM running and a 1-GPU VM stopped; node-b: free, one GPU Lost."""
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    cluster.vm("train", 2, running=True)
    cluster.vm("idle", 1)
    await cluster.settle()
    cluster.start("train")
    cluster.set_health(gpu_name("node-b", 3), healthy=False, message="fell off the bus")
    await cluster.settle()
    await cluster.settle_after(minutes=6)


async def test_piped_it_prints_the_class_counts_and_a_letter_per_slot(cluster: Cluster) -> None:
    await a_cluster(cluster)
    ran = await kubectl(cluster, "status")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0].split() == [
        "CLASS", "RESOURCE", "DEVICES", "AVAILABLE", "BOUND", "ATTACHED", "LOST", "CLEANING",
        "LARGEST", "FREE", "SET",
    ]  # fmt: skip
    # devices 8, available 4, bound 1, attached 2, lost 1, cleaning 0, largest free set 3
    counts = ["8", "4", "1", "2", "1", "0", "3"]
    assert lines[1].split() == ["h100", "nvidia.com/GH100_H100_SXM5_80GB", *counts]
    nodes = {line.split()[0]: line.split() for line in lines[3:] if line.startswith("node-")}
    assert nodes["node-a"][:3] == ["node-a", "Ready", "b.AA"]
    assert nodes["node-b"][:3] == ["node-b", "Ready", "...L"]
    assert "tenant/train (2)" in " ".join(nodes["node-a"])
    assert lines[-1] == ". Available  b Bound  A Attached  L Lost  c Cleaning  r Releasing"
    assert "\x1b[" not in ran.out, "no colour when piped"


async def test_wide_adds_each_class_placement_and_each_node_classes(cluster: Cluster) -> None:
    await a_cluster(cluster)
    ran = await kubectl(cluster, "status", "-o", "wide")
    header, row = ran.out.splitlines()[:2]
    assert header.endswith("POLICY   TOPOLOGY   PINNING   RELEASE AFTER STOP")
    assert row.split()[-4:] == ["Pack", "Node", "Device", "-"]


async def test_json_and_yaml_carry_the_same_facts(cluster: Cluster) -> None:
    await a_cluster(cluster)
    as_json = json.loads((await kubectl(cluster, "status", "-o", "json")).out)
    as_yaml = yaml.safe_load((await kubectl(cluster, "status", "-o", "yaml")).out)
    assert as_json == as_yaml
    (h100,) = as_json["classes"]
    assert (h100["devices"], h100["lost"], h100["largestFreeSet"]) == (8, 1, 3)
    node_a = next(n for n in as_json["nodes"] if n["name"] == "node-a")
    assert [s["phase"] for s in node_a["slots"]] == ["Bound", "Available", "Attached", "Attached"]
    assert node_a["slots"][2]["vm"] == "tenant/train"
    assert node_a["vms"] == {"tenant/train": 2, "tenant/idle": 1}


async def test_a_cordoned_degraded_or_gone_node_says_so(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-b", 2)
    await cluster.settle()
    cluster.cordon("node-a")
    await cluster.remove_node("node-b")
    await cluster.settle()
    states = {
        n["name"]: n["state"]
        for n in json.loads((await kubectl(cluster, "status", "-o", "json")).out)["nodes"]
    }
    assert states == {"node-a": "Ready,cordoned", "node-b": "gone"}


async def test_n_shows_only_that_namespaces_vms(cluster: Cluster) -> None:
    await a_cluster(cluster)
    ran = await kubectl(cluster, "status", "-n", "other")
    assert "tenant/" not in ran.out
    assert "b.AA" in ran.out, "the slots are shown all the same"
