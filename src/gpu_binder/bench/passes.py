"""`gpu-binder bench pass`: the full pass, the requests pass, a cold pass and a leader's
restart (relist and first pass), timed."""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import pstats
import random
import statistics
import time
from collections.abc import Iterator
from typing import Any

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import ClassCount, GPUBindRequest, GPUBindRequestSpec, NameRef, VMRef
from gpu_binder.bench import fixture as fx
from gpu_binder.binder import PASS_KEY, REQUESTS_KEY, Config, Reconciler
from gpu_binder.cache import World, feed, listed


class Samples:
    """Wall-clock and CPU seconds of each timed run. The CPU time (this process's) is the
    figure to compare on a shared machine: other work stretches the wall clock, not it."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.cpu.append(time.process_time() - cpu)
        self.wall.append(time.perf_counter() - wall)


def _ms(samples: Samples) -> dict[str, float]:
    ordered = sorted(samples.wall)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "median_ms": round(statistics.median(ordered) * 1e3, 3),
        "p99_ms": round(p99 * 1e3, 3),
        "cpu_median_ms": round(statistics.median(samples.cpu) * 1e3, 3),
    }


async def _settle(r: Reconciler, limit: int = 20) -> int:
    """Passes until one writes nothing; the number of passes it took."""
    for i in range(limit):
        if (await r.reconcile(PASS_KEY)).writes == 0:
            return i + 1
    raise RuntimeError("the pass did not settle")


async def run(devices: int, repeat: int = 20, seed: int = 1, profile: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    f = fx.new_fixture(seed)
    f.client.put(fx.gpu_class())
    nodes = max(1, devices // 8)
    build = time.perf_counter()
    fx.add_nodes(f, nodes)
    # Every order bound by one pass, as before Config.orders_per_pass: the cold pass times
    # the same work across versions, and the settles take a pass each.
    r = Reconciler(f.client, f.world, Config(orders_per_pass=0), clock=f.clock)
    await _settle(r)  # finalizers and classes: the agent's devices as the binder keeps them
    vms = fx.add_orders(f, nodes * 8, 0.6, rng)
    build_s = time.perf_counter() - build

    cold_t = Samples()
    with cold_t.timed():
        cold = await r.reconcile(PASS_KEY, full=True)
    await _settle(r)

    # Half of the VMs run: a live VMI on their set's node, admitted with their devices.
    for v in vms[::2]:
        devs = f.world.devices.set_of(v.key)
        if devs:
            f.client.put(fx.running_vmi(v, devs[0].spec.node_name, [d.metadata.name for d in devs]))
    await _settle(r)
    # The settled caches are frozen so that the figures time the passes, not the cyclic
    # collector's full scans of every cached object, as `gpu-binder run` freezes them once
    # synced (kube.collector); its collection in full once an interval is not timed here.
    gc.freeze()

    writes_before = f.client.writes
    full = Samples()
    for _ in range(repeat):
        with full.timed():
            await r.reconcile(PASS_KEY, full=True)
    unchanged_writes = f.client.writes - writes_before
    exhaustive = Samples()
    for _ in range(repeat):
        f.world.needs_full = True  # as after a class change: no memory of clean keys trusted
        with exhaustive.timed():
            await r.reconcile(PASS_KEY, full=True)
    walk = Samples()
    for _ in range(repeat):
        with walk.timed():
            touch_every_object(f.world)
    hot = await _profile_exhaustive(r, f, repeat, profile) if profile else None
    incremental = Samples()
    for _ in range(repeat):
        with incremental.timed():
            await r.reconcile(PASS_KEY, full=False)
    unchanged_writes = f.client.writes - writes_before

    answer = Samples()
    for i in range(repeat):
        v = f.client.put(fx.vm("bench", f"req-{i:04d}", 1))
        f.client.put(
            GPUBindRequest(
                metadata=ObjectMeta(name=f"req-{i:04d}", namespace="bench"),
                spec=GPUBindRequestSpec(
                    vm=VMRef(name=v.metadata.name, uid=v.metadata.uid),
                    vmi=NameRef(name=v.metadata.name),
                    requests=(ClassCount(class_name="h100", count=1),),
                ),
            )
        )
        with answer.timed():
            await r.reconcile(REQUESTS_KEY)

    await _settle(r)
    restart = await _restart(f, repeat=3)
    gc.unfreeze()

    bound = sum(len(f.world.devices.set_of(v.key)) for v in vms)
    return {
        "devices": len(f.world.devices),
        "nodes": nodes,
        "vms": len(vms),
        "bound_devices": bound,
        "build_seconds": round(build_s, 2),
        "full_pass": _ms(full),
        "exhaustive_pass": _ms(exhaustive),
        "cache_walk": _ms(walk),
        "exhaustive_per_walk": round(
            statistics.median(exhaustive.cpu) / max(statistics.median(walk.cpu), 1e-9), 1
        ),
        "incremental_pass": _ms(incremental),
        "requests_pass": _ms(answer),
        "cold_pass": {
            "ms": round(cold_t.wall[0] * 1e3, 1),
            "cpu_ms": round(cold_t.cpu[0] * 1e3, 1),
            "writes": cold.writes,
        },
        "writes_on_unchanged_pass": unchanged_writes,
        "restart": restart,
        "repeat": repeat,
        **({"exhaustive_profile": hot} if hot is not None else {}),
    }


def touch_every_object(world: World) -> int:
    """Read one field of every cached VM, VMI and device: the least a step that visits
    each once costs on this heap. The exhaustive pass in units of it says whether the
    pass grows faster than its heap, whatever the heap's size does to each read (a heap
    five times the size misses the CPU's caches more often per object)."""
    n = 0
    for vm in world.vms.values():
        n += len(vm.metadata.name)
    for vmi in world.vmis.values():
        n += len(vmi.metadata.name)
    for d in world.devices.by_name.values():
        n += len(d.spec.node_name)
    return n


async def _profile_exhaustive(
    r: Reconciler, f: fx.Fixture, repeat: int, top: int
) -> list[dict[str, Any]]:
    """The `top` functions of `repeat` more exhaustive passes by their own time, profiled
    apart from the timed ones (the profiler slows what it measures). Their call counts
    are what to compare between sizes: they say whether a step does more than linear
    work, which the time per call, swayed by caches and other load, does not."""
    prof = cProfile.Profile()
    for _ in range(repeat):
        f.world.needs_full = True
        prof.enable()
        await r.reconcile(PASS_KEY, full=True)
        prof.disable()
    # (file, line, function) -> (primitive calls, calls, own seconds, cumulative, callers);
    # typeshed does not declare the attribute.
    rows: dict[tuple[str, int, str], tuple[Any, ...]] = vars(pstats.Stats(prof))["stats"]
    total = sum(row[2] for row in rows.values()) or 1.0
    ranked = sorted(rows.items(), key=lambda item: -item[1][2])[:top]
    return [
        {
            "function": f"{path.rsplit('src/', 1)[-1]}:{line}({name})",
            "calls": row[1],
            "own_ms_per_pass": round(row[2] * 1e3 / repeat, 3),
            "own_share": round(row[2] / total, 3),
        }
        for (path, line, name), row in ranked
    ]


async def _restart(f: fx.Fixture, repeat: int) -> dict[str, Any]:
    """A new leader: its caches listed afresh into a new World, then its first pass, which
    remembers nothing of the old leader's and so judges every key (medians of `repeat`)."""
    relists = Samples()
    firsts = Samples()
    writes = 0
    namespace = Config().kubevirt_namespace
    for _ in range(repeat):
        with relists.timed():
            world = World()
            feed(world, listed(f.client.objects, namespace), namespace)
        leader = Reconciler(f.client, world, clock=f.clock)
        before = f.client.writes
        with firsts.timed():
            await leader.reconcile(PASS_KEY, full=True)
        writes = max(writes, f.client.writes - before)
    return {
        "relist_ms": round(statistics.median(relists.wall) * 1e3, 1),
        "first_pass_ms": round(statistics.median(firsts.wall) * 1e3, 1),
        "relist_cpu_ms": round(statistics.median(relists.cpu) * 1e3, 1),
        "first_pass_cpu_ms": round(statistics.median(firsts.cpu) * 1e3, 1),
        "first_pass_writes": writes,
    }


def main(devices: int, repeat: int, profile: int = 0) -> dict[str, Any]:
    return asyncio.run(run(devices, repeat, profile=profile))
