"""`gpu-binder bench heap`: what a real binder's heap costs at a cluster's size, idle.

The control plane and KWOK nodes of bench.start (NODES nodes of GPUS GPUs, no scheduler:
nothing is started), `gpu-binder run` settled on every GPUDevice, then left idle for IDLE
seconds. Printed: the binder's resident memory (now and its peak), the objects its
collector keeps out of scans (`gpu_binder_gc_frozen_objects`), and its collector's pauses
(`gpu_binder_gc_pause_duration_seconds`) while it settled and while idle — where the
one full collection a `--gc-freeze-interval` makes is the long stop left (kube.collector).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_binder.bench import histograms
from gpu_binder.bench.start import Bench, install_rbac, say
from gpu_binder.devcluster import fleet
from gpu_binder.envtest import ControlPlane
from gpu_binder.envtest.kwok import start_kwok
from gpu_binder.envtest.process import Process
from gpu_binder.kube import KubeClient, load

FROZEN = "gpu_binder_gc_frozen_objects"


def memory_kib(pid: int) -> dict[str, int]:
    """The process's resident set now (VmRSS) and at its peak (VmHWM), in KiB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


async def _measure(bench: Bench, kwok: Path, idle: float) -> dict[str, Any]:
    client = KubeClient(await load(str(bench.cp.kubeconfig)), pool=256, timeout=120)
    kwok_proc = start_kwok(kwok, bench.work, bench.cp.kubeconfig)
    binder: Process | None = None
    try:
        t = time.perf_counter()
        await bench.seed(client)
        seeded = time.perf_counter() - t
        binder = bench.start_binder(client)
        t = time.perf_counter()
        await bench.settled(client, binder)
        settled = time.perf_counter() - t
        assert binder.proc is not None
        pid = binder.proc.pid
        at_settle = await histograms.scrape(bench.metrics_url)
        memory_settled = memory_kib(pid)
        say(f"binder settled; idle {idle:.0f}s")
        await asyncio.sleep(idle)
        at_end = await histograms.scrape(bench.metrics_url)
        memory_end = memory_kib(pid)
    finally:
        if binder is not None:
            binder.stop()
        kwok_proc.stop()
        await client.close()
    return {
        "nodes": bench.nodes,
        "gpus": bench.nodes * bench.gpus,
        "gc_freeze_interval": bench.gc_freeze_interval,
        "seed_seconds": round(seeded, 1),
        "settle_seconds": round(settled, 1),
        "idle_seconds": idle,
        "rss_mib_settled": round(memory_settled["VmRSS"] / 1024),
        "rss_mib_end": round(memory_end["VmRSS"] / 1024),
        "rss_mib_peak": round(memory_end["VmHWM"] / 1024),
        "frozen_objects": histograms.gauge(at_end, FROZEN),
        "gc_pauses_settling": histograms.both("", at_settle)["gc_pauses"],
        "gc_pauses_idle": histograms.both(at_settle, at_end)["gc_pauses"],
    }


def main(
    nodes: int = 6250,
    gpus: int = 8,
    idle: float = 240.0,
    gc_freeze_interval: str | None = "60s",
    progress: Callable[[str], None] = say,
) -> dict[str, Any]:
    """`gc_freeze_interval`: the binder's --gc-freeze-interval (None: its default, 10 min,
    which an idle of a few minutes would not reach)."""
    with tempfile.TemporaryDirectory(prefix="gpu-binder-bench-heap-") as tmp:
        cp = ControlPlane(components=(), progress=progress)
        with cp:
            cp.install_crds(fleet.CRDS)
            install_rbac(cp)
            bench = Bench(cp, Path(tmp), nodes, gpus, 0, 1, gc_freeze_interval)
            return asyncio.run(_measure(bench, cp.node_assets.kwok, idle))
