"""Sets: each VM's devices normalized to what it orders, on one node."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpu_binder.api.types import BindReason, GPUDevice, Phase
from gpu_binder.binder import ops
from gpu_binder.binder.config import Config
from gpu_binder.binder.context import Context
from gpu_binder.binder.deadlines import Deadlines
from gpu_binder.cache.deviceindex import set_node


def order_exists(ctx: Context, key: str) -> bool:
    vm = ctx.world.vms.get(key)
    if vm is not None:
        return vm.metadata.deletion_timestamp is None
    # A standalone VMI being deleted is an order on its way out, as a VM being deleted is:
    # what it uses stays attached until it ends, the rest of its set goes.
    return any(v.vm_name is None and not v.being_deleted for v in ctx.world.live_vmis(key))


@dataclass
class SetsMemory:
    # Sets held for the VMI their bind request was for (awaiting_vmi), due when the wait
    # ends: a ghost's set goes then, not at the next resync.
    vmi_arrivals: Deadlines = field(default_factory=Deadlines)


def sets(ctx: Context) -> None:
    world = ctx.world
    clean = ctx.memory.verdicts("sets")
    keys = ctx.scope.set_keys(world, clean)
    # Sets whose wait for their request's VMI ended: decided now, by no event (_await_vmi).
    arrivals = ctx.memory.of(SetsMemory).vmi_arrivals
    due = arrivals.due(ctx.now)
    for key in due:
        arrivals.discard(key)
    keys += sorted(k for k in set(due) - set(keys) if k in world.devices.by_vm)
    for key in keys:
        signature = (world.devices.key_gen.get(key), world.class_gen)
        if clean.get(key) == signature:
            continue
        mark = ctx.mark()
        if _normalize(ctx, key):
            clean.forget(key)  # waits on the clock, not on an event: decided again next sweep
            continue
        ctx.settle("sets", key, signature, mark)


def vmi_arrival(config: Config) -> timedelta:
    """How long after the binder answered a bind request the set it bound waits for the
    request's VMI, whatever its order says meanwhile.

    The webhook creates the request as the VMI's admission begins and waits for the answer
    for at most bindTimeout; the API server gives that webhook call its timeoutSeconds,
    which must exceed bindTimeout (deploy/binder/webhook.yaml). After the webhook's reply
    the rest of the admission (other mutating webhooks, the API server's validation,
    validating webhooks and policies, the write to etcd) takes milliseconds, so a VMI that
    is not in the binder's watch one more bindTimeout after the answer was refused: by the
    API server (a 422, e.g. an invalid label), another webhook, or a client that gave up.
    Its set is then a ghost that keeps other tenants off the node, and goes.

    attachmentGrace is the wrong bound: it is how long an unmanaged VMI may run before
    its GPUs are adopted, minutes at scale, and a ghost does not run. A VMI that arrives
    after its set went (an admission slower than this) holds no device: its launcher pod
    names slots that are not its set's, the pod webhook refuses it, and KubeVirt starts it
    again through a new admission, which asks again.
    """
    return 2 * config.bind_timeout


def awaiting_vmi(ctx: Context, devs: list[GPUDevice]) -> datetime | None:
    """When the wait of a set bound by a request for its VMI ends (vmi_arrival after the
    answer), None when it is over: the webhook has its answer and the VMI is on its way to
    the API server, which no event announces. Until it arrives, what the set is for is the
    request's order, which is the VMI's spec (cache.vmiorder), not its VM's template: a
    VMI may order GPUs its VM does not (one owned by a VM but not created by it), and the
    set it was admitted with must not go before it runs (issue 11, attack 1)."""
    arrival = vmi_arrival(ctx.config)
    end = max(
        (
            b.bound_at + arrival
            for d in devs
            if (b := d.status.binding) is not None and b.reason == BindReason.REQUEST
        ),
        default=None,
    )
    return end if end is not None and end > ctx.now else None


def _await_vmi(ctx: Context, key: str, devs: list[GPUDevice]) -> bool:
    """Hold the set while awaiting_vmi, with a pass due when the wait ends."""
    end = awaiting_vmi(ctx, devs)
    if end is None:
        return False
    ctx.memory.of(SetsMemory).vmi_arrivals.set(key, end)
    return True


def _normalize(ctx: Context, key: str) -> bool:
    """Normalize one set; True when the decision waits for the clock."""
    world = ctx.world
    devs = world.devices.set_of(key)
    if not devs:
        return False
    if not order_exists(ctx, key):
        if _await_vmi(ctx, key, devs):
            return True
        for d in devs:
            if d.status.attachment is None:
                ops.release(ctx, d, "its VM was deleted")
        return False
    mine = world.own_set(key)
    if len(mine) < len(devs):
        own = {d.metadata.name for d in mine}
        for d in devs:
            if d.metadata.name not in own and d.status.attachment is None:
                # Bound under an earlier uid of this name (a VM deleted and created again
                # while no binder watched): never the new order's uncleaned.
                ops.release(ctx, d, f"it was bound to an earlier {_kind(ctx, key)} of that name")
    if not mine:
        return False
    node = set_node(mine)
    order = world.order_of(key)
    # While a VMI of the order lives, the set is what it runs with plus what the VM holds
    # for its next start: an edit of the template takes effect then, not under the guest.
    live = bool(world.live_vmis(key))
    if not live and _await_vmi(ctx, key, mine):
        return True
    kept: dict[str, int] = {}
    # Devices in use first, then healthy ones, then the longest held.
    for d in sorted(mine, key=_keep_rank):
        if d.status.attachment is not None:
            kept[d.status.class_name] = kept.get(d.status.class_name, 0) + 1
            continue
        if d.spec.node_name != node:
            ops.release(ctx, d, f"the rest of the set is on {node}")
            continue
        if not live and kept.get(d.status.class_name, 0) >= order.get(d.status.class_name, 0):
            ops.release(
                ctx,
                d,
                f"the VM orders {order.get(d.status.class_name, 0)} × "
                f"{d.status.class_name or 'unclassified'}",
            )
            continue
        kept[d.status.class_name] = kept.get(d.status.class_name, 0) + 1
    return False


def _kind(ctx: Context, key: str) -> str:
    return "VM" if key in ctx.world.vms else "VMI"


def _keep_rank(d: GPUDevice) -> tuple[int, int, float, str]:
    in_use = 0 if d.status.attachment is not None else 1
    lost = 1 if d.status.phase == Phase.LOST else 0
    bound_at = d.status.binding.bound_at.timestamp() if d.status.binding else 0.0
    return (in_use, lost, bound_at, d.metadata.name)
