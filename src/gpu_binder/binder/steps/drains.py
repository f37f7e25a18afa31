"""Drains: a VMI with passthrough GPUs cannot live-migrate, so a drain of its node waits on
it for ever under evictionStrategy LiveMigrate or External; the binder says which VMIs a
cordoned node's drain waits for, on their VMs (an Event) and on the node's GPUs (the
condition DrainBlocked), and stops saying so once the node is uncordoned or they end.

KubeVirt: virt-handler marks a VMI with any hostDevices, more than one GPU, or one GPU that
is not a mediated device as not live-migratable (pkg/virt-handler/vm.go,
vmiContainsNonMigratablePCIHostDevices); the eviction admitter refuses to evict the
launcher pod of a non-migratable VMI under LiveMigrate, and only marks one under External
for another controller to act on (pkg/virt-api/webhooks/validating-webhook/admitters/
pod-eviction-admitter.go); the strategy is the VMI's, else the KubeVirt CR's
(pkg/util/migrations/migrations.go, VMIEvictionStrategy), whose default is None. Under None
and LiveMigrateIfPossible the pod is evicted: the guest shuts down and its set may move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_binder.api.meta import Condition, set_condition
from gpu_binder.binder import ops
from gpu_binder.binder.context import Context
from gpu_binder.binder.kubevirtcr import eviction_strategy
from gpu_binder.cache.deviceindex import DRAIN_BLOCKED, DeviceIndex

# The strategies under which KubeVirt evicts no non-migratable VMI.
BLOCKING = frozenset({"LiveMigrate", "External"})


def blocking(ctx: Context, node: str) -> dict[str, tuple[str, str]]:
    """The live VMIs using GPUs of the node whose eviction KubeVirt refuses: VMI key ->
    (its order key, its evictionStrategy)."""
    world = ctx.world
    default = ""
    out: dict[str, tuple[str, str]] = {}
    for vmi_key, uid in _attached_vmis(ctx, node):
        if vmi_key in out:
            continue
        vmi = world.vmis.get(vmi_key)
        if vmi is None or not vmi.live or vmi.metadata.uid != uid:
            continue
        strategy = vmi.eviction_strategy
        if not strategy:
            default = default or eviction_strategy(ctx.world, ctx.config)
            strategy = default
        if strategy in BLOCKING:
            out[vmi.key] = (vmi.order_key, strategy)
    return out


def _attached_vmis(ctx: Context, node: str) -> frozenset[tuple[str, str]]:
    """The (key, uid) of the VMIs the node's devices are attached to, kept until a device
    of the node changes: every pass asks for every cordoned node, and few change."""
    devices = ctx.world.devices
    gen = devices.node_gen.get(node, 0)
    memory = ctx.memory.of(DrainsMemory).attached_on
    cached = memory.get(node)
    if cached is not None and cached[0] == gen:
        return cached[1]
    # Only attached devices can name a VMI: the index spares a look at every other one.
    vmis = frozenset(
        (att.vmi.key, att.vmi.uid)
        for name in devices.names_on(node) & devices.attached
        if (att := devices.by_name[name].status.attachment) is not None
    )
    memory[node] = (gen, vmis)
    return vmis


@dataclass
class DrainsMemory:
    # Orders whose VMI was said to block a drain, to unsay once it does not.
    blocked: set[str] = field(default_factory=set)
    # Per node: the VMIs its devices are attached to, as of a device generation.
    attached_on: dict[str, tuple[int, frozenset[tuple[str, str]]]] = field(default_factory=dict)


def drains(ctx: Context) -> None:
    world = ctx.world
    devices = world.devices
    flagged = {devices.by_name[n].spec.node_name for n in devices.drain_flagged}
    said = ctx.memory.of(DrainsMemory).blocked
    still: set[str] = set()
    for node in sorted(world.cordoned | flagged):
        blockers = blocking(ctx, node) if node in world.cordoned else {}
        cond = _condition(ctx, node, blockers) if blockers else None
        for name in _to_look_at(devices, node, cond is None):
            d = devices.by_name[name]
            have = tuple(c for c in d.status.conditions if c.type == DRAIN_BLOCKED)
            if cond is None:
                if not have:
                    continue
                conditions = tuple(c for c in d.status.conditions if c.type != DRAIN_BLOCKED)
            else:
                conditions = set_condition(d.status.conditions, cond)
                if conditions == d.status.conditions:
                    continue
            status = d.status.model_copy(update={"conditions": conditions})
            ctx.plan.device_status(d.model_copy(update={"status": status}))
        for vmi_key, (key, strategy) in sorted(blockers.items()):
            still.add(key)
            said.add(key)
            vmi_name = vmi_key.partition("/")[2]
            ctx.say(
                f"drain/{key}",
                ops.vm_note(
                    ctx,
                    key,
                    "GPUDrainBlocked",
                    f"VMI {vmi_name} blocks the drain of node {node}: evictionStrategy "
                    f"{strategy} needs a live migration, which a VMI with passthrough GPUs "
                    "cannot make; stop the VM to free the node, or give it evictionStrategy "
                    "None or LiveMigrateIfPossible",
                    warning=True,
                ),
            )
    for key in sorted(said - still):
        said.discard(key)
        ctx.unsay(f"drain/{key}")


def _to_look_at(devices: DeviceIndex, node: str, unblocked: bool) -> list[str]:
    """The node's devices whose condition may change, in name order: on a node whose drain
    waits for no VMI, only those still carrying DrainBlocked (the index knows them, and
    the node's other devices have nothing to drop)."""
    names = devices.names_on(node)
    return sorted(names & devices.drain_flagged if unblocked else names)


def _condition(ctx: Context, node: str, blockers: dict[str, tuple[str, str]]) -> Condition:
    named = ", ".join(f"{k} ({s})" for k, (_, s) in sorted(blockers.items()))
    return Condition(
        type=DRAIN_BLOCKED,
        status="True",
        reason="NotLiveMigratable",
        message=f"node {node} is cordoned and its drain waits for VMI {named}: a VMI with "
        "passthrough GPUs cannot live-migrate, and KubeVirt evicts none under evictionStrategy "
        "LiveMigrate or External",
        last_transition_time=ctx.now,
    )
