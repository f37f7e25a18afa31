"""Node fit beyond GPUs: a set goes only where the VM's CPU and memory fit too, so a
binding never strands a VM the scheduler cannot start."""

from __future__ import annotations

from datetime import timedelta

from .cluster import T0, Cluster
from .resources import node_resources, vm_requests


async def test_a_node_short_of_cpu_for_the_vm_is_passed_over(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 8)
    node_resources(cluster, "node-a", "16", "256Gi")
    node_resources(cluster, "node-b", "64", "256Gi")
    cluster.vm("vm", 4, running=True)
    vm_requests(cluster, "vm", "32", "64Gi")
    await cluster.settle()
    # node-a is the fullest fit by GPUs, but has 16 cores for a VM asking 32.
    assert cluster.node_of("vm") == "node-b"


async def test_a_node_short_of_memory_for_the_vm_is_passed_over(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 8)
    node_resources(cluster, "node-a", "64", "32Gi")
    node_resources(cluster, "node-b", "64", "256Gi")
    cluster.vm("vm", 1, running=True)
    vm_requests(cluster, "vm", "4", "64Gi")
    await cluster.settle()
    assert cluster.node_of("vm") == "node-b"


async def test_what_bound_vms_ask_for_is_taken_from_the_node(cluster: Cluster) -> None:
    cluster.node("node-a", 8)
    node_resources(cluster, "node-a", "32", "256Gi")
    cluster.vm("first", 1, running=True, created=T0 - timedelta(hours=1))
    vm_requests(cluster, "first", "24", "16Gi")
    cluster.vm("second", 1, running=True)
    vm_requests(cluster, "second", "16", "16Gi")
    await cluster.settle()
    assert len(cluster.set_of("first")) == 1
    # Seven GPUs are free, but 8 of 32 cores: the second VM would never start there.
    assert cluster.set_of("second") == []
    [refused] = cluster.events_of("second", "GPUUnplaceable")
    assert "lack the CPU or memory the VM asks for (16 CPU, 16 GiB)" in refused.message


async def test_cpu_freed_by_a_deleted_vm_lets_a_waiting_order_in(cluster: Cluster) -> None:
    cluster.gpu_class(cleaning="None")
    cluster.node("node-a", 8)
    node_resources(cluster, "node-a", "32", "256Gi")
    cluster.vm("first", 1, running=True, created=T0 - timedelta(hours=1))
    vm_requests(cluster, "first", "24", "16Gi")
    cluster.vm("second", 1, running=True)
    vm_requests(cluster, "second", "16", "16Gi")
    await cluster.settle()
    assert cluster.set_of("second") == []
    await cluster.delete_vm("first")
    await cluster.settle()
    assert len(cluster.set_of("second")) == 1


async def test_completing_a_set_does_not_count_the_vm_twice(cluster: Cluster) -> None:
    cluster.node("node-a", 8)
    node_resources(cluster, "node-a", "32", "256Gi")
    cluster.vm("vm", 1, running=True)
    vm_requests(cluster, "vm", "24", "16Gi")
    await cluster.settle()
    node = cluster.node_of("vm")
    cluster.vm("vm", 3, running=True)  # the VM now orders three
    vm_requests(cluster, "vm", "24", "16Gi")
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 3 and cluster.node_of("vm") == node


async def test_a_node_that_reports_no_cpu_or_memory_sets_no_limit(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.vm("vm", 2, running=True)
    vm_requests(cluster, "vm", "512", "4Ti")
    await cluster.settle()
    assert cluster.node_of("vm") == "node-a"
