"""`gpu-binder sim`: the embedded cluster under a random workload, with faults on --chaos."""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
from dataclasses import dataclass
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import GPUDevice, GPUUsageRecord
from gpu_binder.binder.config import Config
from gpu_binder.sim.catalog import H100, L40S
from gpu_binder.sim.cluster import ClassDef, Cluster

CLASSES = [
    ClassDef("h100", "nvidia.com/GH100_H100_SXM5_80GB", H100, release_after="2h"),
    ClassDef("l40s", "nvidia.com/AD102GL_L40S", L40S, policy="Spread", release_after="30m"),
]
SIZES = (1, 1, 1, 2, 2, 4, 8)
FAULTS = (
    "notready",
    "ready",
    "cordon",
    "uncordon",
    "unhealthy",
    "healthy",
    "conflict",
    "restart",
    "delete-device",
    "binder-down",
)


@dataclass
class Workload:
    rng: random.Random
    gpus_per_node: int
    keys: list[str]
    serial: int = 0

    def new_vm(self, c: Cluster) -> str:
        self.serial += 1
        cls = "l40s" if self.rng.random() < 0.25 else "h100"
        n = min(self.rng.choice(SIZES), self.gpus_per_node)
        ns, name = f"tenant-{self.serial % 20:02d}", f"vm-{self.serial:06d}"
        c.add_vm(ns, name, {cls: n})
        self.keys.append(f"{ns}/{name}")
        return f"{ns}/{name}"


async def build(
    nodes: int,
    gpus_per_node: int,
    vms: int,
    seed: int,
    sweep_always: bool = False,
    config: Config | None = None,
) -> tuple[Cluster, Workload]:
    c = Cluster(CLASSES, config, seed=seed, sweep_always=sweep_always)
    for i in range(nodes):
        await c.add_node(f"node-{i:04d}", "l40s" if i % 4 == 3 else "h100", gpus_per_node)
    w = Workload(random.Random(seed), gpus_per_node, [])
    for _ in range(vms):
        w.new_vm(c)
    await c.tick(1)
    return c, w


async def step(c: Cluster, w: Workload, chaos: bool) -> bool:
    """One random event; True when it was a fault."""
    rng = w.rng
    roll = rng.random()
    key = rng.choice(w.keys)
    if chaos and roll < 0.06:
        await fault(c, rng)
        return True
    # Tenants start a VM less often than they stop one, so about 40% of VMs want to run:
    # near the cluster's capacity, where placement and requests are tested hardest.
    if roll < 0.30:
        await c.set_running(key, True)
    elif roll < 0.72:
        await c.set_running(key, False)
    elif roll < 0.76:
        await c.delete_vm(key)
        w.keys.remove(key)
        w.new_vm(c)
        await c.settle()
    else:
        await c.tick(rng.choice((1, 5, 30, 120)))
    return False


async def fault(c: Cluster, rng: random.Random) -> None:
    nodes = sorted(c.fleet.nodes)
    devices = sorted(c.world.devices.by_name)
    kind = rng.choice(FAULTS)
    node = rng.choice(nodes)
    if kind == "notready":
        await c.set_node(node, ready=False)
    elif kind == "ready":
        for n in nodes:
            if not c.fleet.nodes[n].agent_up:
                await c.set_node(n, ready=True)
                break
    elif kind in ("cordon", "uncordon"):
        await c.set_node(node, cordoned=kind == "cordon")
    elif kind in ("unhealthy", "healthy") and devices:
        await c.set_health(rng.choice(devices), kind == "healthy", "fell off the bus")
    elif kind == "conflict" and devices:
        c.client.conflict_next_write(GPUDevice, rng.choice(devices))
    elif kind == "restart":
        c.restart_binder()
    elif kind == "binder-down":
        # An outage or a leader failover: KubeVirt goes on, and VMs stopped meanwhile
        # end and are deleted while no binder watches (invariant 6: billed to the finish).
        c.binder_up = False
        await c.tick(rng.choice((5, 60)))
        running = sorted(v.order_key for v in c.client.objects(VirtualMachineInstance) if v.live)
        for key in rng.sample(running, min(len(running), rng.choice((1, 3)))):
            await c.set_running(key, False)
        await c.tick(rng.choice((5, 60)))
        c.binder_up = True
        c.restart_binder()
    elif kind == "delete-device" and devices:
        await c.delete_device(rng.choice(devices))
    elif kind == "gpu-gone" and devices:
        # The GPU falls off the bus for good: its agent deletes the GPUDevice.
        await c.remove_gpu(rng.choice(devices))
    elif kind in ("plugin-down", "plugin-up"):
        await c.set_plugin(node, kind == "plugin-up")
    await c.tick(rng.choice((1, 60, 400)))


async def run(
    nodes: int,
    gpus_per_node: int,
    vms: int,
    events: int,
    seed: int,
    chaos: bool,
    sweep_always: bool = False,
    config: Config | None = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    c, w = await build(nodes, gpus_per_node, vms, seed, sweep_always, config)
    gc.freeze()  # the cluster's objects live for the whole run: the collector need not scan them
    violations: list[str] = []
    faults = 0
    for _ in range(events):
        faults += await step(c, w, chaos)
        for v in c.check():
            violations.append(f"t+{int((c.clock() - c.t0).total_seconds())}s {v}")
        if len(violations) > 50:
            break
    reasons: dict[str, int] = {}
    for note in c.notes():
        reasons[note.reason] = reasons.get(note.reason, 0) + 1
    records = c.client.objects(GPUUsageRecord)
    bindings = {
        d.metadata.name: d.status.binding.vm.key
        for d in c.client.objects(GPUDevice)
        if d.status.binding is not None
    }
    return {
        "devices": len(c.client.objects(GPUDevice)),
        "vms": len(w.keys),
        "events": events,
        "faults": faults,
        "binds": reasons.get("GPUOrder", 0) + reasons.get("GPURequest", 0),
        "moves": reasons.get("GPUMove", 0),
        "rebinds": reasons.get("GPURebind", 0),
        "adoptions": reasons.get("GPUAdopted", 0),
        "requests_answered": c.stats.requests_answered,
        "requests_failed": c.stats.requests_failed,
        "starts": c.kubelet.started,
        "starts_failed": len(c.kubelet.failed_starts),
        "conflicts": c.stats.conflicts,
        "passes": c.stats.passes,
        "usage_records_open": sum(1 for r in records if r.spec.end is None),
        "usage_records_closed": sum(1 for r in records if r.spec.end is not None),
        "violations": violations,
        "seconds": round(time.perf_counter() - started, 2),
        "final_bindings": bindings,
    }


def main_sim(
    nodes: int, gpus_per_node: int, vms: int, events: int, seed: int, chaos: bool, as_json: bool
) -> int:
    figures = asyncio.run(run(nodes, gpus_per_node, vms, events, seed, chaos))
    figures.pop("final_bindings")
    print(json.dumps(figures) if as_json else json.dumps(figures, indent=2))
    return 1 if figures["violations"] else 0
