"""`gpu-binder sim`: the embedded cluster under a random or trace workload, with faults on
--chaos, checking every invariant after every event."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import GPUDevice, GPUUsageRecord
from gpu_binder.binder.config import Config
from gpu_binder.binder.ledger import of_ledger
from gpu_binder.replay.order import Order, orders_from_pods
from gpu_binder.replay.trace import Node, TraceError, load_nodes, load_pods
from gpu_binder.sim.catalog import H100, L40S
from gpu_binder.sim.cluster import ClassDef, Cluster
from gpu_binder.sim.trace import CREATE, TraceWorkload, build_trace

CLASSES = [
    ClassDef("h100", "nvidia.com/GH100_H100_SXM5_80GB", H100, release_after="2h"),
    ClassDef("l40s", "nvidia.com/AD102GL_L40S", L40S, policy="Spread", release_after="30m"),
]
SIZES = (1, 1, 1, 2, 2, 4, 8)
# The chance that an event is a fault under --chaos.
FAULT_ODDS = 0.06
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
    if chaos and roll < FAULT_ODDS:
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
        check(c, violations)
        if len(violations) > 50:
            break
    return {
        "devices": len(c.client.objects(GPUDevice)),
        "vms": len(w.keys),
        "events": events,
        "faults": faults,
        **figures(c),
        "violations": violations,
        "seconds": round(time.perf_counter() - started, 2),
        "final_bindings": final_bindings(c),
    }


def check(c: Cluster, violations: list[str]) -> None:
    """Every invariant, now; violations are added with the time they were found."""
    for v in c.check():
        violations.append(f"t+{int((c.clock() - c.t0).total_seconds())}s {v}")


def figures(c: Cluster) -> dict[str, int]:
    """What the binder, webhook and kubelets did, for either workload."""
    reasons: dict[str, int] = {}
    for note in c.notes():
        reasons[note.reason] = reasons.get(note.reason, 0) + 1
    records = of_ledger(c.client.objects(GPUUsageRecord))
    return {
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
    }


def final_bindings(c: Cluster) -> dict[str, str]:
    return {
        d.metadata.name: d.status.binding.vm.key
        for d in c.client.objects(GPUDevice)
        if d.status.binding is not None
    }


def gpu_hours_billed(c: Cluster) -> float:
    """GPU-hours of the usage records: closed ones to their end, open ones to now."""
    now = c.clock()
    seconds = sum(
        ((r.spec.end or now) - r.spec.start).total_seconds()
        for r in of_ledger(c.client.objects(GPUUsageRecord))
    )
    return round(seconds / 3600, 2)


async def run_trace(
    nodes: Sequence[Node],
    orders: Sequence[Order],
    seed: int,
    chaos: bool,
    time_scale: float = 1.0,
) -> dict[str, Any]:
    """Play the trace's orders on its cluster; with chaos, before each trace event a fault
    with the random workload's odds (6%), from the same list of faults."""
    started = time.perf_counter()
    c, w = await build_trace(nodes, orders, seed, time_scale)
    gc.freeze()
    rng = random.Random(seed)
    violations: list[str] = []
    faults = 0
    played = 0
    while not w.done and len(violations) <= 50:
        if chaos and rng.random() < FAULT_ODDS:
            await fault(c, rng)
            faults += 1
            check(c, violations)
        await w.step(c)
        played += 1
        check(c, violations)
    w.finish(c)
    return {
        "devices": len(c.client.objects(GPUDevice)),
        "vms": len(w.placed) + len(w.placed_later) + refused(w),
        "events": played,
        "faults": faults,
        **figures(c),
        "violations": violations,
        "seconds": round(time.perf_counter() - started, 2),
        **trace_figures(c, w),
        "final_bindings": final_bindings(c),
    }


def refused(w: TraceWorkload) -> int:
    return sum(1 for e in w.events[: w.next_event] if e.kind == CREATE) - (
        len(w.placed) + len(w.placed_later) + w.unservable
    )


def trace_figures(c: Cluster, w: TraceWorkload) -> dict[str, Any]:
    return {
        "nodes": len(w.resources),
        "classes": len(w.classes),
        "pods": len(w.orders),
        "orders_placed": len(w.placed),
        "orders_placed_later": len(w.placed_later),
        "orders_refused": refused(w),
        "orders_unservable": w.unservable,
        "late_events": w.late_events,
        "simulated_hours": round((c.clock() - c.t0).total_seconds() / 3600, 2),
        "gpu_hours_ordered": round(w.gpu_seconds_ordered / 3600, 2),
        "gpu_hours_billed": gpu_hours_billed(c),
    }


def main_sim(
    nodes: int, gpus_per_node: int, vms: int, events: int, seed: int, chaos: bool, as_json: bool
) -> int:
    figures = asyncio.run(run(nodes, gpus_per_node, vms, events, seed, chaos))
    return report(figures, as_json)


def report(figures: dict[str, Any], as_json: bool) -> int:
    figures.pop("final_bindings")
    print(json.dumps(figures) if as_json else json.dumps(figures, indent=2))
    return 1 if figures["violations"] else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-binder sim",
        description="The embedded cluster under a random workload or a GPU cluster trace, "
        "with faults on --chaos; every invariant is checked after every event and the run "
        "prints its figures (exit 1 on a violation).",
    )
    p.add_argument("--nodes", type=int, default=20, help="random: nodes (default 20)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="random: GPUs a node")
    p.add_argument("--vms", type=int, default=100, help="random: VMs (default 100)")
    p.add_argument("--events", type=int, default=2000, help="random: events (default 2000)")
    p.add_argument(
        "--trace",
        nargs=2,
        type=Path,
        metavar=("NODES.csv", "PODS.csv"),
        help="play an Alibaba GPU trace (node list, pod list) instead: each GPU pod is a VM "
        "created and started at its creation_time, deleted at its deletion_time",
    )
    p.add_argument(
        "--trace-pods",
        type=int,
        metavar="N",
        help="trace: play only the first N GPU pods of the pod list (default all)",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="S",
        help="trace: S trace seconds per simulated second (default 1)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--chaos", action="store_true", help="inject faults at random")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main_sim_cli(argv: Sequence[str]) -> int:
    """`gpu-binder sim` with its own flags: 0 on a clean run, 1 on a violation, 2 on a usage
    or trace error."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    if args.trace is None:
        if args.trace_pods is not None or args.time_scale != 1.0:
            return usage("--trace-pods and --time-scale need --trace")
        return main_sim(
            args.nodes, args.gpus_per_node, args.vms, args.events, args.seed, args.chaos, args.json
        )
    if args.trace_pods is not None and args.trace_pods < 1:
        return usage("--trace-pods must be at least 1")
    if not args.time_scale > 0:
        return usage("--time-scale must be positive")
    nodes_csv, pods_csv = args.trace
    try:
        nodes = load_nodes(nodes_csv)
        orders = orders_from_pods(load_pods(pods_csv))
    except TraceError as err:
        return usage(str(err))
    if not any(n.gpus for n in nodes):
        return usage(f"{nodes_csv}: no node has a GPU")
    if not orders:
        return usage(f"{pods_csv}: no pod asks for a GPU")
    orders = orders[: args.trace_pods]
    figures = asyncio.run(run_trace(nodes, orders, args.seed, args.chaos, args.time_scale))
    return report(figures, args.json)


def usage(message: str) -> int:
    print(f"gpu-binder sim: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main_sim_cli(sys.argv[1:]))
