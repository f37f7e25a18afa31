"""`gpu-binder bench soak`: whether a real binder's memory stays flat over many VM lifecycles.

The control plane, KWOK nodes and KubeVirt stand-in of bench.start, and `gpu-binder run`
settled on their GPUs; then ROUNDS rounds of one burst of VMS VM starts (bench start's
flow: VM, VMI through the webhook, launcher pod through the pod webhook, scheduled by the
real kube-scheduler) followed by the deletion of every VM, VMI and pod, until the binder
has released every set and closed every record. After each round: the binder's resident
memory, the series its /metrics serves (a label that grows with VMs grows them), the
objects its collector froze, the burst's p99 admission, and whether the ledger kept a
record of every GPU of every start and left none open.

What a cluster lives through in days, VMs coming and going, is played here in minutes:
memory that grows with lifecycles shows as a slope across rounds once the first rounds
have grown the allocator's arenas to their working size. Time alone (a lease renewed for
weeks) is not what this measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_binder.api.types import OPEN_RECORDS, GPUDevice, GPUUsageRecord
from gpu_binder.bench import histograms, ledger
from gpu_binder.bench.heap import FROZEN, memory_kib
from gpu_binder.bench.start import NAMESPACE, Bench, Scheduled, install_rbac, say
from gpu_binder.binder import Config
from gpu_binder.devcluster import fleet
from gpu_binder.envtest import ControlPlane
from gpu_binder.envtest.components import CONTROLLER_MANAGER, SCHEDULER
from gpu_binder.envtest.kwok import start_kwok
from gpu_binder.envtest.process import Process
from gpu_binder.kube import KubeClient, load

# How long the binder may take to release every set and close every record of a round.
RELEASE_TIMEOUT = 180.0


def series(text: str) -> int:
    """The samples a /metrics text serves: one line each, comments aside."""
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def slope(rounds: list[dict[str, Any]], key: str, per: int) -> float | None:
    """Growth of `key` per `per` VMs over the second half of the rounds (least squares),
    so that the first rounds' warm-up is not read as growth; None below four rounds."""
    half = rounds[len(rounds) // 2 :]
    if len(rounds) < 4 or len(half) < 2:
        return None
    xs = [float(r["vms_so_far"]) for r in half]
    ys = [float(r[key]) for r in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if not var:
        return None
    return round(per * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var, 2)


async def released(client: KubeClient, ledger_namespace: str) -> dict[str, Any]:
    """Until no GPU is bound and no record is open, or RELEASE_TIMEOUT: what is left."""
    t = time.perf_counter()
    while True:
        bound = sum(1 for d in (await client.list(GPUDevice)).items if d.status.binding)
        records = await client.list(GPUUsageRecord, ledger_namespace, OPEN_RECORDS)
        waited = time.perf_counter() - t
        if not (bound or records.items) or waited >= RELEASE_TIMEOUT:
            return {"bound_gpus": bound, "open_records": len(records.items), "waited_s": waited}
        await asyncio.sleep(1.0)


async def _round(
    bench: Bench, client: KubeClient, scheduled: Scheduled, binder: Process, n: int
) -> dict[str, Any]:
    t = time.perf_counter()
    burst = await bench.burst(client, scheduled, f"r{n:03d}")
    kept = await ledger.unrecorded(client, NAMESPACE, Config().ledger_namespace)
    await bench.delete_vms(client)
    left = await released(client, Config().ledger_namespace)
    text = await histograms.scrape(bench.metrics_url)
    assert binder.proc is not None
    return {
        "round": n,
        "vms_so_far": (n + 1) * bench.vms,
        "seconds": round(time.perf_counter() - t, 1),
        "rss_mib": round(memory_kib(binder.proc.pid)["VmRSS"] / 1024, 1),
        "metric_series": series(text),
        "frozen_objects": histograms.gauge(text, FROZEN),
        "admitted_p99_ms": burst["vmi_create_to_admitted"].get("p99_ms"),
        "starts_per_s": burst["starts_per_s"],
        "not_scheduled": burst["not_scheduled"],
        "pods_not_on_their_sets_node": burst["pods_not_on_their_sets_node"],
        "gpus_without_a_record": kept["without_attached_record"] + kept["without_reserved_record"],
        "bound_gpus_after_release": left["bound_gpus"],
        "open_records_after_release": left["open_records"],
    }


async def _soak(
    bench: Bench, kwok: Path, rounds: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    client = KubeClient(await load(str(bench.cp.kubeconfig)), pool=256, timeout=120)
    kwok_proc = start_kwok(kwok, bench.work, bench.cp.kubeconfig)
    binder: Process | None = None
    done: list[dict[str, Any]] = []
    scheduled = Scheduled()
    watch: asyncio.Task[None] | None = None
    try:
        await bench.seed(client)
        watch = asyncio.create_task(scheduled.watch(client))
        binder = bench.start_binder(client)
        await bench.settled(client, binder)
        assert binder.proc is not None
        settled_mib = round(memory_kib(binder.proc.pid)["VmRSS"] / 1024, 1)
        for n in range(rounds):
            done.append(await _round(bench, client, scheduled, binder, n))
            progress(f"round {n}: {done[-1]}")
        peak = round(memory_kib(binder.proc.pid)["VmHWM"] / 1024, 1)
    finally:
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if binder is not None:
            binder.stop()
        kwok_proc.stop()
        await client.close()
    return {
        "nodes": bench.nodes,
        "gpus_per_node": bench.gpus,
        "vms_per_round": bench.vms,
        "gpus_per_vm": bench.per_vm,
        "gc_freeze_interval": bench.gc_freeze_interval,
        "rss_mib_settled": settled_mib,
        "rss_mib_peak": peak,
        "rss_mib_per_1000_vms": slope(done, "rss_mib", 1000),
        "metric_series_per_1000_vms": slope(done, "metric_series", 1000),
        "frozen_objects_per_1000_vms": slope(done, "frozen_objects", 1000),
        "rounds": done,
    }


def main(
    nodes: int = 50,
    gpus: int = 8,
    vms: int = 200,
    per_vm: int = 2,
    rounds: int = 30,
    gc_freeze_interval: str | None = "60s",
    progress: Callable[[str], None] = say,
) -> dict[str, Any]:
    """`gc_freeze_interval`: the binder's --gc-freeze-interval (default 60s, so that cyclic
    garbage frozen for up to an interval is not read as growth; None: the binder's own
    default, 10 min)."""
    if vms * per_vm > nodes * gpus:
        raise ValueError(f"{vms} VMs of {per_vm} GPUs do not fit {nodes} × {gpus} GPUs")
    with tempfile.TemporaryDirectory(prefix="gpu-binder-bench-soak-") as tmp:
        cp = ControlPlane(components=(SCHEDULER, CONTROLLER_MANAGER), progress=progress)
        with cp:
            cp.install_crds(fleet.CRDS)
            install_rbac(cp)
            bench = Bench(cp, Path(tmp), nodes, gpus, vms, per_vm, gc_freeze_interval)
            return asyncio.run(_soak(bench, cp.node_assets.kwok, rounds, progress))
