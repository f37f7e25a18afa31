"""The random workload of `gpu-binder sim` and the faults of --chaos.

Tenants start and stop VMs (`virtctl`), delete them and create others. Under --chaos the
VMs are also made and run as KubeVirt users do, against a KubeVirt that behaves as its
source says (sim.kubevirt): every runStrategy (the deprecated `spec.running`; Halted and
Manual VMs started by virtctl, Halted ones also by setting RerunOnFailure or Once, Always
made by virtctl start and left by virtctl stop; a few WaitAsReceiver), GPUs
from instancetypes (whose objects are edited later: VMs keep the revision they recorded),
disks on WaitForFirstConsumer DataVolumes (a temporary pod first), guests that power off
or crash, template edits while running (more GPUs, fewer, another class), VMs deleted and
created again under the same name (a new uid; also while no binder watches), node and
virt-controller clocks up to ±10 minutes off (stepped again now and then), the LiveUpdate
affinity sync; and faults: nodes lost and back, cordons, unhealthy and deleted GPUs, lost
write races, binder restarts and outages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUDevice
from gpu_binder.binder import Config
from gpu_binder.sim.catalog import H100, L40S
from gpu_binder.sim.cluster import ClassDef, Cluster

CLASSES = [
    ClassDef("h100", "nvidia.com/GH100_H100_SXM5_80GB", H100, release_after="2h"),
    ClassDef("l40s", "nvidia.com/AD102GL_L40S", L40S, policy="Spread", release_after="30m"),
]
SIZES = (1, 1, 1, 2, 2, 4, 8)
# How far the clocks of other machines are off, either way, under --chaos (seconds).
CHAOS_SKEW = 600.0
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
    "clock-step",
)
# How new VMs are made under --chaos: stopped (None is the deprecated `running: false`),
# so that, as in the plain workload, tenants' starts and stops decide how many run; and a
# few receivers, whose VMI waits for a migration that never comes.
STRATEGY_WEIGHTS: tuple[tuple[str | None, float], ...] = (
    (None, 0.35),
    ("Halted", 0.35),
    ("Manual", 0.29),
    ("WaitAsReceiver", 0.01),
)
# How a tenant starts a stopped VM under --chaos: `virtctl start` (a Halted VM becomes
# Always), or by setting a strategy that starts it (RerunOnFailure, Once).
START_WEIGHTS = (("virtctl", 0.6), ("RerunOnFailure", 0.2), ("Once", 0.2))
# Cluster instancetypes the chaos workload's VMs may name: name -> (class, GPUs).
INSTANCETYPES = {
    "gpu-h100-1": ("h100", 1),
    "gpu-h100-2": ("h100", 2),
    "gpu-h100-4": ("h100", 4),
    "gpu-l40s-1": ("l40s", 1),
    "gpu-l40s-2": ("l40s", 2),
}
INSTANCETYPE_ODDS = 0.15
DATA_VOLUME_ODDS = 0.15


@dataclass
class Workload:
    rng: random.Random
    gpus_per_node: int
    keys: list[str]
    serial: int = 0
    # Whether VMs are made and run in every way KubeVirt allows (--chaos), or the plain way.
    kubevirt: bool = False
    # VMs deleted to be created again under their name, once the old one is gone.
    recreate: list[str] = field(default_factory=list)
    recreated: int = 0

    def new_vm(self, c: Cluster, key: str | None = None) -> str:
        rng = self.rng
        if key is None:
            self.serial += 1
            key = f"tenant-{self.serial % 20:02d}/vm-{self.serial:06d}"
            self.keys.append(key)
        ns, _, name = key.partition("/")
        cls = "l40s" if rng.random() < 0.25 else "h100"
        n = min(rng.choice(SIZES), self.gpus_per_node)
        if not self.kubevirt:
            c.add_vm(ns, name, {cls: n})
            return key
        strategy = rng.choices([s for s, _ in STRATEGY_WEIGHTS], [w for _, w in STRATEGY_WEIGHTS])[
            0
        ]
        instancetype = None
        if rng.random() < INSTANCETYPE_ODDS:
            instancetype = rng.choice(sorted(INSTANCETYPES))
        c.add_vm(
            ns,
            name,
            {cls: n},
            run_strategy=strategy,
            instancetype=instancetype,
            data_volume=rng.random() < DATA_VOLUME_ODDS,
        )
        return key

    async def recreate_pending(self, c: Cluster) -> None:
        """Create again each VM whose old one of that name is gone by now."""
        for key in list(self.recreate):
            ns, _, name = key.partition("/")
            if c.client.peek(VirtualMachine, name, ns) is None:
                self.recreate.remove(key)
                self.new_vm(c, key)
                self.recreated += 1


async def build(
    nodes: int,
    gpus_per_node: int,
    vms: int,
    seed: int,
    sweep_always: bool = False,
    config: Config | None = None,
    chaos: bool = False,
    live_update: bool | None = None,
) -> tuple[Cluster, Workload]:
    c = Cluster(
        CLASSES,
        config,
        seed=seed,
        sweep_always=sweep_always,
        skew=CHAOS_SKEW if chaos else 0.0,
        live_update=live_update,
        race=chaos,
    )
    for i in range(nodes):
        await c.add_node(f"node-{i:04d}", "l40s" if i % 4 == 3 else "h100", gpus_per_node)
    if chaos:
        for name, (cls, n) in sorted(INSTANCETYPES.items()):
            c.add_instancetype(name, {cls: n})
    w = Workload(random.Random(seed), gpus_per_node, [], kubevirt=chaos)
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
        await fault(c, w, rng)
        return True
    if w.recreate:
        await w.recreate_pending(c)
    # Tenants start a VM less often than they stop one, so about 40% of VMs want to run:
    # near the cluster's capacity, where placement and requests are tested hardest.
    if roll < 0.30:
        await start(c, w, key) if w.kubevirt else await c.set_running(key, True)
    elif roll < 0.72 - (0.06 if chaos else 0.0):
        await c.set_running(key, False)
    elif chaos and roll < 0.72:
        await kubevirt_event(c, w, rng, key)
    elif roll < 0.76:
        await c.delete_vm(key)
        w.keys.remove(key)
        w.new_vm(c)
        await c.settle()
    else:
        await c.tick(rng.choice((1, 5, 30, 120)))
    return False


async def start(c: Cluster, w: Workload, key: str) -> None:
    """A tenant starts the VM: `virtctl start`, or (a Halted one) by giving it a run
    strategy that starts VMIs by itself."""
    how = w.rng.choices([h for h, _ in START_WEIGHTS], [p for _, p in START_WEIGHTS])[0]
    ns, _, name = key.partition("/")
    vm = c.client.peek(VirtualMachine, name, ns)
    strategy = (vm.raw.get("spec") or {}).get("runStrategy") if vm is not None else None
    if how == "virtctl" or strategy != "Halted":
        await c.set_running(key, True)
    else:
        await c.set_run_strategy(key, how)


async def kubevirt_event(c: Cluster, w: Workload, rng: random.Random, key: str) -> None:
    """What else tenants and guests do under --chaos (6% of events)."""
    ns, _, name = key.partition("/")
    kind = rng.choices(
        ("recreate", "poweroff", "crash", "edit", "instancetype"), (20, 15, 5, 18, 2)
    )[0]
    if kind == "recreate":
        await c.delete_vm(key)
        w.recreate.append(key)
        await w.recreate_pending(c)
        await c.settle()
    elif kind in ("poweroff", "crash"):
        vmi = c.client.peek(VirtualMachineInstance, name, ns)
        if vmi is not None and vmi.live:
            await c.guest_ends(key, failed=kind == "crash")
    elif kind == "edit":
        # More GPUs, fewer, or another class: the running VMI keeps what it has.
        cls = "l40s" if rng.random() < 0.25 else "h100"
        await c.edit_template(key, {cls: min(rng.choice(SIZES), w.gpus_per_node)})
    else:
        name = rng.choice(sorted(INSTANCETYPES))
        cls, n = INSTANCETYPES[name]
        c.add_instancetype(name, {cls: max(1, min(n + rng.choice((-1, 1)), w.gpus_per_node))})
        await c.settle()


async def fault(c: Cluster, w: Workload, rng: random.Random) -> None:
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
        # end and are deleted while no binder watches (invariant 6: billed to the finish);
        # under the KubeVirt mix, a VM is also deleted and created again under its name.
        c.binder_up = False
        await c.tick(rng.choice((5, 60)))
        running = sorted(v.order_key for v in c.client.objects(VirtualMachineInstance) if v.live)
        for key in rng.sample(running, min(len(running), rng.choice((1, 3)))):
            await c.set_running(key, False)
        if w.kubevirt and running:
            key = rng.choice(running)
            if key in w.keys:
                await c.delete_vm(key)
                w.recreate.append(key)
                await w.recreate_pending(c)
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
    elif kind == "clock-step":
        # NTP steps a node's clock that had drifted (or virt-controller's node's).
        c.clocks.step(rng.choice(("", node)))
    await c.tick(rng.choice((1, 60, 400)))
