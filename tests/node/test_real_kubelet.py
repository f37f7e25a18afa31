"""A VM's GPUs on a real kubelet: the agent is the node's device plugin, the real scheduler
places the launcher pod, the real kubelet calls Allocate, and the container sees exactly
the bound GPUs (issue 12, item 1)."""

from __future__ import annotations

import play
from nodecluster import NodeTier, delete, get, wait_for
from play import (
    addresses,
    bound_set,
    launch,
    namespace,
    pci_env,
    report_running,
    start_vmi,
    stop_vmi,
    vm,
    wait_bound,
    wait_running,
)
from realcluster import uid

SLOTS = [f"gpu.cozystack.io/10de-2330-s{i}" for i in range(8)]


def test_node_allocatable_shows_each_gpu_as_a_slot_resource(tier: NodeTier) -> None:
    assert tier.served_slots() == SLOTS


def test_a_vm_runs_on_exactly_its_bound_gpus_kept_across_a_stop_and_reset_before_reuse(
    tier: NodeTier,
) -> None:
    cp = tier.cp
    ns = namespace(cp, f"tenant-{uid()}")
    vm(cp, ns, "vm", 2, tier.resource)
    bound = wait_bound(cp, ns, "vm", 2)

    vmi = start_vmi(cp, ns, "vm")
    names = [g["deviceName"] for g in vmi["spec"]["domain"]["devices"]["gpus"]]
    assert all(n.startswith("gpu.cozystack.io/") for n in names), names
    pod = launch(cp, vmi)
    running = wait_running(cp, pod)
    assert running["spec"]["nodeName"] == tier.node.name
    assert addresses(pci_env(cp, pod)) == sorted(bound)
    report_running(cp, vmi, tier.node.name)

    # Stopped: the set stays the VM's; started again, the same GPUs.
    play.set_run_strategy(cp, ns, "vm", "Halted")
    stop_vmi(cp, vmi, pod)
    assert bound_set(cp, ns, "vm") == bound
    play.set_run_strategy(cp, ns, "vm", "Always")
    vmi = start_vmi(cp, ns, "vm")
    pod = launch(cp, vmi)
    wait_running(cp, pod)
    assert addresses(pci_env(cp, pod)) == sorted(bound)
    report_running(cp, vmi, tier.node.name)

    # Released: the agent resets them before another tenant's pod gets them.
    stop_vmi(cp, vmi, pod)
    delete(cp, f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines/vm")
    other = namespace(cp, f"tenant-{uid()}")
    vm(cp, other, "all", 8, tier.resource)
    wait_bound(cp, other, "all", 8, timeout=60)
    for address, name in bound.items():
        device = get(cp, f"{play.DEVICES}/{name}")
        assert device is not None
        assert device["spec"].get("lastResetFor"), device
        assert (tier.host.path(address) / "reset").read_text() == "1"
    vmi = start_vmi(cp, other, "all")
    pod = launch(cp, vmi)
    wait_running(cp, pod)
    assert set(bound) <= set(addresses(pci_env(cp, pod)))
    stop_vmi(cp, vmi, pod)
    delete(cp, f"/apis/kubevirt.io/v1/namespaces/{other}/virtualmachines/all")
    wait_for(lambda: not bound_set(cp, other, "all"), 60, "the 8 GPUs released")
