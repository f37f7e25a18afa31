"""Helpers for tests of CPU and memory fit: nodes that report them, VMs that ask for them."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachine

from .cluster import NAMESPACE, Cluster


def node_resources(cluster: Cluster, name: str, cpu: str, memory: str) -> None:
    """The node's allocatable CPU and memory, beside the device units it serves."""
    node = cluster.client.peek(Node, name)
    assert node is not None, f"no node {name}"
    raw = node.to_dict()
    raw.setdefault("status", {}).setdefault("allocatable", {}).update(
        {"cpu": cpu, "memory": memory}
    )
    cluster.client.put(Node.from_dict(raw))


def vm_requests(cluster: Cluster, name: str, cpu: str, memory: str) -> VirtualMachine:
    """The VM now asks for this much CPU and memory (its domain's resource requests)."""
    vm = cluster.client.peek(VirtualMachine, name, NAMESPACE)
    assert vm is not None, f"no VM {name}"
    raw: dict[str, Any] = vm.to_dict()
    domain = raw["spec"]["template"]["spec"]["domain"]
    domain["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    return cluster.client.put(VirtualMachine.from_dict(raw))
