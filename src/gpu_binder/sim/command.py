"""`gpu-binder sim`: the embedded cluster under a random or trace workload, with faults on
--chaos, checking every invariant after every event.

The figures a run prints (FIGURES says what each one counts) are counted where the thing
happens: decisions by the binder's Events, admissions by the API server's calls to the
webhooks, starts by virt-handler, pods by virt-controller, the scheduler and the kubelets.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_binder.api.types import GPUDevice, GPUUsageRecord
from gpu_binder.binder import Config, of_ledger
from gpu_binder.replay.order import Order, orders_from_pods
from gpu_binder.replay.trace import Node, TraceError, load_nodes, load_pods
from gpu_binder.sim.chaos import FAULT_ODDS, Workload, build, fault, step
from gpu_binder.sim.cluster import Cluster
from gpu_binder.sim.ledgercheck import compare
from gpu_binder.sim.trace import CREATE, TraceWorkload, build_trace

# What each figure of a run counts (printed by --help, kept beside the code that counts).
FIGURES = {
    "devices": "GPUDevices at the end",
    "vms": "VMs at the end",
    "events": "workload events played (fewer than asked when violations stopped the run)",
    "faults": "events that were faults (--chaos)",
    "binds": "sets the binder bound (Events GPUOrder, GPURequest)",
    "moves": "sets the binder moved to another node (Events GPUMove)",
    "rebinds": "devices rebound after a loss (Events GPURebind)",
    "adoptions": "running VMIs whose devices the binder adopted (Events GPUAdopted)",
    "vmis_admitted_pinned": "VMI creations the webhook admitted pinned to the set its VM "
    "had, without a bind request",
    "vmis_admitted_after_request": "VMI creations admitted once the binder bound a bind request",
    "vmis_denied": "VMI creations the webhook denied, for any reason (each retry counts)",
    "requests_bound": "bind requests the binder answered Bound",
    "requests_failed": "bind requests the binder answered Failed: its refusals, mostly no "
    "free set that large (each retry of a start counts)",
    "requests_unanswered": "bind requests no binder answered in time (the binder was down)",
    "vms_refused": "distinct VMs with at least one failed bind request",
    "vmis_created": "VMIs created (admitted): the VM controller's, and standalone ones",
    "vmis_running": "VMIs whose guest started (virt-handler set them Running)",
    "launcher_pods": "virt-launcher pods virt-controller created",
    "temporary_pods": "WaitForFirstConsumer temporary pods virt-controller created",
    "pods_denied": "pod creations the pod webhook denied",
    "pods_waited_for_node": "pods the scheduler found no node for, at least once",
    "pods_failed_admission": "pods the kubelet's device manager refused (their units were "
    "not free on the node)",
    "affinity_syncs": "VMIs whose affinity or nodeSelector the VM controller made its "
    "template's (the LiveUpdate rollout strategy)",
    "vm_sync_errors": "VM controller syncs that failed and were retried with backoff "
    "(denied VMI creations among them)",
    "vms_recreated": "VMs deleted and created again under their name (--chaos)",
    "conflicts": "write conflicts (409) the binder met in its passes",
    "passes": "binder passes run: full passes and requests passes (one per bind request)",
    "usage_records_open": "usage records still open at the end",
    "usage_records_closed": "usage records closed",
    "ledger_check": "the ledger against the sim's own truth of GPU time (invariant 12, judged "
    "once at the end of the run): truth_gpu_seconds and ledger_gpu_seconds per kind "
    "(attached, reserved; open intervals to the end), intervals judged, "
    "worst_interval_seconds (seconds one interval was billed wrongly, too much plus too "
    "little), worst_namespace_class_seconds (the largest difference of one namespace's "
    "seconds of one class and kind), beyond_tolerance (intervals off by more than 1 s "
    "at an end, with more than 1 s of gaps, or missed or invented, whether a binder ran "
    "then or not: each a violation (12))",
    "violations": "the first 50 violations found, each with its time",
    "violation_counts": "violations found per invariant, all of them",
    "seconds": "wall time of the run",
}
MAX_LISTED = 50
# Events between two gc.freeze() calls: what survived them (new versions of objects,
# watch histories, records) stays, and without a freeze every full collection would scan
# it all again — a tenth of a run's CPU time on 200 nodes.
FREEZE_EVERY = 100
# The collector's thresholds for a run from the command line: a young collection every
# 200,000 allocations, not 700 (a run allocates millions, nearly all short-lived or kept
# for good: at 20,000 the young collections still took 3% of a 200-node run's CPU, 0.3%
# at 200,000, with the same peak memory).
COLLECT_AT = (200_000, 10, 10)


@contextmanager
def _rarer_collections() -> Iterator[None]:
    previous = gc.get_threshold()
    gc.set_threshold(*COLLECT_AT)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


async def run(
    nodes: int,
    gpus_per_node: int,
    vms: int,
    events: int,
    seed: int,
    chaos: bool,
    sweep_always: bool = False,
    config: Config | None = None,
    *,
    max_violations: int = MAX_LISTED,
    live_update: bool | None = None,
) -> dict[str, Any]:
    """The random workload; it stops once more than max_violations were found (0: never);
    live_update=False runs KubeVirt with the Stage rollout strategy (no affinity sync)."""
    started = time.perf_counter()
    c, w = await build(
        nodes, gpus_per_node, vms, seed, sweep_always, config, chaos=chaos, live_update=live_update
    )
    gc.freeze()  # the cluster's objects live for the whole run: the collector need not scan them
    violations: list[str] = []
    counts: dict[str, int] = {}
    faults = played = 0
    for _ in range(events):
        faults += await step(c, w, chaos)
        played += 1
        if played % FREEZE_EVERY == 0:
            gc.freeze()
        check(c, violations, counts)
        if max_violations and sum(counts.values()) > max_violations:
            break
    ledger = check_ledger(c, violations, counts)
    return {
        "devices": len(c.client.objects(GPUDevice)),
        "vms": len(w.keys),
        "events": played,
        "faults": faults,
        **figures(c),
        "vms_recreated": w.recreated,
        "ledger_check": ledger,
        "violations": violations,
        "violation_counts": dict(sorted(counts.items())),
        "seconds": round(time.perf_counter() - started, 2),
        "final_bindings": final_bindings(c),
    }


def check(c: Cluster, violations: list[str], counts: dict[str, int] | None = None) -> None:
    """Every invariant, now; violations are added with the time they were found (the first
    MAX_LISTED of them), and counted per invariant."""
    for v in c.check():
        if counts is not None:
            number = v[: v.index(")") + 1] if v.startswith("(") else "?"
            counts[number] = counts.get(number, 0) + 1
        if len(violations) < MAX_LISTED or counts is None:
            violations.append(f"t+{int((c.clock() - c.t0).total_seconds())}s {v}")


def check_ledger(c: Cluster, violations: list[str], counts: dict[str, int]) -> dict[str, Any]:
    """Invariant 12 over the whole run, once at its end: a binder that was down meanwhile
    closes what ended in its absence only when it is back. Its violations are added as
    check adds the others; the figures are returned."""
    result = compare(c.truth.stretches, c.client.objects(GPUUsageRecord), c.clock())
    for v in result.violations:
        counts["(12)"] = counts.get("(12)", 0) + 1
        if len(violations) < MAX_LISTED:
            violations.append(f"t+{int((c.clock() - c.t0).total_seconds())}s {v}")
    return result.figures()


def figures(c: Cluster) -> dict[str, int]:
    """What the binder, webhooks, KubeVirt and kubelets did, for either workload (FIGURES)."""
    reasons: dict[str, int] = {}
    for note in c.notes():
        reasons[note.reason] = reasons.get(note.reason, 0) + 1
    records = of_ledger(c.client.objects(GPUUsageRecord))
    stats, kubevirt = c.stats, c.kubevirt
    return {
        "binds": reasons.get("GPUOrder", 0) + reasons.get("GPURequest", 0),
        "moves": reasons.get("GPUMove", 0),
        "rebinds": reasons.get("GPURebind", 0),
        "adoptions": reasons.get("GPUAdopted", 0),
        "vmis_admitted_pinned": stats.vmis_admitted_pinned,
        "vmis_admitted_after_request": stats.vmis_admitted_after_request,
        "vmis_denied": stats.vmis_denied,
        "requests_bound": stats.requests_bound,
        "requests_failed": stats.requests_failed,
        "requests_unanswered": stats.requests_unanswered,
        "vms_refused": len(stats.vms_refused),
        "vmis_created": kubevirt.created,
        "vmis_running": c.kubelet.started,
        "launcher_pods": kubevirt.vmis.pods_created["launcher"],
        "temporary_pods": kubevirt.vmis.pods_created["temporary"],
        "pods_denied": len(kubevirt.vmis.pod_denials),
        "pods_waited_for_node": len(kubevirt.scheduler.waited),
        "pods_failed_admission": len(c.kubelet.failed_starts),
        "affinity_syncs": kubevirt.vms.affinity_syncs,
        "vm_sync_errors": len(kubevirt.vms.start_errors),
        "conflicts": stats.conflicts,
        "passes": stats.passes,
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
    counts: dict[str, int] = {}
    faults = 0
    played = 0
    plain = Workload(rng, 0, [])
    while not w.done and sum(counts.values()) <= MAX_LISTED:
        if chaos and rng.random() < FAULT_ODDS:
            await fault(c, plain, rng)
            faults += 1
            check(c, violations, counts)
        await w.step(c)
        played += 1
        check(c, violations, counts)
    w.finish(c)
    ledger = check_ledger(c, violations, counts)
    return {
        "devices": len(c.client.objects(GPUDevice)),
        "vms": len(w.placed) + len(w.placed_later) + refused(w),
        "events": played,
        "faults": faults,
        **figures(c),
        "ledger_check": ledger,
        "violations": violations,
        "violation_counts": dict(sorted(counts.items())),
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
    nodes: int,
    gpus_per_node: int,
    vms: int,
    events: int,
    seed: int,
    chaos: bool,
    as_json: bool,
    max_violations: int = MAX_LISTED,
    live_update: bool | None = None,
) -> int:
    with _rarer_collections():
        figures = asyncio.run(
            run(
                nodes,
                gpus_per_node,
                vms,
                events,
                seed,
                chaos,
                max_violations=max_violations,
                live_update=live_update,
            )
        )
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
        epilog="figures:\n" + "\n".join(f"  {k}: {v}" for k, v in FIGURES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument(
        "--max-violations",
        type=int,
        default=MAX_LISTED,
        metavar="N",
        help=f"random: stop once more than N violations were found (0: play every event; "
        f"default {MAX_LISTED})",
    )
    p.add_argument(
        "--vm-rollout-strategy",
        choices=("LiveUpdate", "Stage"),
        default="LiveUpdate",
        help="random: KubeVirt's vmRolloutStrategy (default LiveUpdate, KubeVirt's own "
        "default, under which the VM controller syncs a VMI's affinity to its template's)",
    )
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
            args.nodes,
            args.gpus_per_node,
            args.vms,
            args.events,
            args.seed,
            args.chaos,
            args.json,
            args.max_violations,
            args.vm_rollout_strategy == "LiveUpdate",
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
    with _rarer_collections():
        figures = asyncio.run(run_trace(nodes, orders, args.seed, args.chaos, args.time_scale))
    return report(figures, args.json)


def usage(message: str) -> int:
    print(f"gpu-binder sim: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main_sim_cli(sys.argv[1:]))
