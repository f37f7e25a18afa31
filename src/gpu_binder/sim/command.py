"""`gpu-binder sim`: the embedded cluster under a random workload, with faults on --chaos."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from gpu_binder.api.types import GPUDevice, GPUUsageRecord
from gpu_binder.sim.check import check_cluster
from gpu_binder.sim.cluster import ClassDef, Cluster

CLASSES = [
    ClassDef("h100", "nvidia.com/GH100_H100_SXM5_80GB", "0x2330", "H100"),
    ClassDef(
        "l40s", "nvidia.com/AD102GL_L40S", "0x26b9", "L40S", policy="Spread", release_after="30m"
    ),
]
SIZES = (1, 1, 1, 2, 2, 4, 8)


async def run(
    nodes: int, gpus_per_node: int, vms: int, events: int, seed: int, chaos: bool
) -> dict[str, Any]:
    rng = random.Random(seed)
    c = Cluster(CLASSES, seed=seed)
    for i in range(nodes):
        cls = "l40s" if i % 4 == 3 else "h100"
        c.add_node(f"node-{i:04d}", {cls: gpus_per_node})
    keys: list[str] = []
    for i in range(vms):
        cls = "l40s" if rng.random() < 0.25 else "h100"
        n = min(rng.choice(SIZES), gpus_per_node)
        key = f"tenant-{i % 20:02d}/vm-{i:05d}"
        ns, name = key.split("/")
        c.add_vm(ns, name, {cls: n})
        keys.append(key)
    await c.tick(1)
    started = time.perf_counter()
    violations: list[str] = []
    faults = 0
    for _ in range(events):
        roll = rng.random()
        key = rng.choice(keys)
        if chaos and roll < 0.08:
            faults += 1
            await _fault(c, rng)
        elif roll < 0.45:
            await c.set_running(key, True)
        elif roll < 0.8:
            await c.set_running(key, False)
        elif roll < 0.85:
            await c.delete_vm(key)
            keys.remove(key)
            name = f"vm-r{rng.randrange(1 << 30):09d}"
            new = f"{key.split('/')[0]}/{name}"
            c.add_vm(new.split("/")[0], name, {rng.choice(("h100", "l40s")): rng.choice(SIZES)})
            keys.append(new)
        else:
            await c.tick(rng.choice((1, 5, 30, 120)))
        await c.settle()
        for v in check_cluster(c):
            violations.append(f"t+{int((c.clock() - c.t0).total_seconds())}s {v}")
        if len(violations) > 50:
            break
    reasons: dict[str, int] = {}
    for note in c.notes():
        reasons[note.reason] = reasons.get(note.reason, 0) + 1
    records = c.client.objects(GPUUsageRecord)
    return {
        "devices": len(c.client.objects(GPUDevice)),
        "vms": len(keys),
        "events": events,
        "faults": faults,
        "binds": reasons.get("GPUOrder", 0) + reasons.get("GPURequest", 0),
        "moves": reasons.get("GPUMove", 0),
        "rebinds": reasons.get("GPURebind", 0),
        "adoptions": reasons.get("GPUAdopted", 0),
        "requests_answered": c.stats.requests_answered,
        "requests_failed": c.stats.requests_failed,
        "starts_denied": c.stats.starts_denied,
        "starts_failed": c.stats.starts_failed,
        "conflicts": c.stats.conflicts,
        "usage_records_open": sum(1 for r in records if r.spec.end is None),
        "usage_records_closed": sum(1 for r in records if r.spec.end is not None),
        "violations": violations,
        "seconds": round(time.perf_counter() - started, 2),
    }


async def _fault(c: Cluster, rng: random.Random) -> None:
    nodes = sorted(c.world.nodes)
    devices = sorted(c.world.devices.by_name)
    kind = rng.choice(
        (
            "notready",
            "ready",
            "cordon",
            "uncordon",
            "unhealthy",
            "healthy",
            "conflict",
            "restart",
            "delete-device",
        )
    )
    if kind in ("notready", "ready") and nodes:
        await c.set_node(rng.choice(nodes), ready=kind == "ready")
    elif kind in ("cordon", "uncordon") and nodes:
        await c.set_node(rng.choice(nodes), cordon=kind == "cordon")
    elif kind in ("unhealthy", "healthy") and devices:
        await c.set_device(
            rng.choice(devices),
            health="Unhealthy" if kind == "unhealthy" else "Healthy",
            health_message="fell off the bus" if kind == "unhealthy" else "",
        )
    elif kind == "conflict" and devices:
        c.client.conflict_next_write(GPUDevice, rng.choice(devices))
    elif kind == "restart":
        c.restart_binder()
    elif kind == "delete-device" and devices and rng.random() < 0.2:
        await c.client.delete(GPUDevice, rng.choice(devices))
    await c.tick(rng.choice((1, 60, 400)))


def main_sim(
    nodes: int, gpus_per_node: int, vms: int, events: int, seed: int, chaos: bool, as_json: bool
) -> int:
    figures = asyncio.run(run(nodes, gpus_per_node, vms, events, seed, chaos))
    print(json.dumps(figures) if as_json else json.dumps(figures, indent=2))
    return 1 if figures["violations"] else 0
