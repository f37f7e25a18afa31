"""Bind requests: the webhook waits, so this step answers them before anything else.

A pass answers at most `Config.requests_per_pass` of them, the oldest first, and the
reconciler runs the requests key again at once while some wait: a burst of hundreds
answered in one pass had every webhook wait for every bind of the burst, past its bind
timeout; in passes of at most a hundred the first answers go out after a few round trips
(since a Bound answer no longer waits for the whole pass, a pass of a hundred admitted a
burst sooner than passes of 32, whose later requests waited for the passes before), and
the total written is the same. A Bound answer is written as soon as its own devices' writes
are (Plan.write's `after`), ahead of the pass's binds not started yet, no longer after
every bind of the pass (Plan.waves); a Failed one still waits for them all, as it counts
on the room they take.

The leader's own webhook hands its requests over in memory (World.asked), never as
objects: they are answered here in the same line, oldest first, by the same rules and the
same one writer, only the answer is told to the webhook (writes.Answer) instead of written.

It also deletes the answered requests their webhook left behind: the webhook deletes a
request once it has read the answer, but a webhook that died in between leaves it, and a
standalone VMI's request has no owner to be garbage-collected with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpu_binder.api.types import BindReason, GPUBindRequest, RequestPhase
from gpu_binder.binder import ops
from gpu_binder.binder.completion import complete
from gpu_binder.binder.context import Context
from gpu_binder.binder.deadlines import Deadlines
from gpu_binder.binder.queries import move_reason
from gpu_binder.binder.writes import Answer, Delete, Status
from gpu_binder.cache.deviceindex import set_node

# An answered request lives this many bind timeouts before the binder deletes it: its
# webhook stopped waiting after one, so a request still there well past that was left.
LEFT_AFTER_TIMEOUTS = 4
# Deletions per pass: a backlog (webhooks down for a while) goes over a few passes,
# and never delays the answers a pass makes.
DELETIONS_PER_PASS = 50


@dataclass
class RequestsMemory:
    # Answered bind requests, by key, due for deletion should their webhook not delete them.
    expiry: Deadlines = field(default_factory=Deadlines)


def bind_requests(ctx: Context) -> None:
    world = ctx.world
    limit = ctx.config.requests_per_pass
    pending = {rkey: world.requests[rkey] for rkey in world.pending_requests}
    # In-memory names hold a ":" no object name may: the two never share a key.
    pending.update(world.asked)
    for rkey in oldest_pending(pending, pending, limit):
        _answer(ctx, pending[rkey], rkey in world.asked)
    _delete_left(ctx)


def oldest_pending(
    pending: Iterable[str], requests: Mapping[str, GPUBindRequest], limit: int
) -> list[str]:
    """The pending requests a pass answers: all (limit 0) in key order, else the `limit`
    created first (then by key), so a burst's early requests, whose webhooks have waited
    longest, are not overtaken by later ones."""
    if limit <= 0:
        return sorted(pending)

    def created(rkey: str) -> tuple[datetime, str]:
        ts = requests[rkey].metadata.creation_timestamp
        return (ts or datetime.min.replace(tzinfo=UTC), rkey)

    return sorted(pending, key=created)[:limit]


def _expires(ctx: Context, req: GPUBindRequest) -> datetime:
    answered = req.status.answered_at or req.metadata.creation_timestamp or ctx.now
    return answered + LEFT_AFTER_TIMEOUTS * ctx.config.bind_timeout


def _delete_left(ctx: Context) -> None:
    """Delete answered requests left past their time, in O(due) per pass: requests join
    the deadlines as this binder answers them, and on its first sweep (or a class change)
    those answered before it, by an earlier leader."""
    world = ctx.world
    expiry = ctx.memory.of(RequestsMemory).expiry
    if ctx.scope.exhaustive:
        for rkey, req in world.requests.items():
            if req.status.phase != RequestPhase.PENDING:
                expiry.set(rkey, _expires(ctx, req))
    deleted = 0
    for rkey in expiry.due(ctx.now):
        left = world.requests.get(rkey)
        if left is None or left.status.phase == RequestPhase.PENDING:
            # Gone, or its answer was never written: it joins again once answered.
            expiry.discard(rkey)
            continue
        when = _expires(ctx, left)
        if when > ctx.now:
            expiry.set(rkey, when)
            continue
        if deleted >= DELETIONS_PER_PASS:
            break  # the rest stay due for the next pass
        # Kept in the deadlines until the world has it gone, so a failed delete is retried.
        ctx.plan.write(Delete(left))
        deleted += 1


def _answer(ctx: Context, req: GPUBindRequest, local: bool) -> None:
    mark = len(ctx.plan.touched)
    world = ctx.world
    ns = req.metadata.namespace
    key = f"{ns}/{req.spec.vm.name}"
    order: dict[str, int] = {}
    for r in req.spec.requests:
        order[r.class_name] = order.get(r.class_name, 0) + r.count
    unknown = sorted(c for c in order if c not in world.classes)
    vm = world.vms.get(key)
    if unknown:
        return _reply(ctx, req, "", (), f"unknown GPU class {', '.join(unknown)}", local=local)
    if vm is not None and req.spec.vm.uid and vm.metadata.uid != req.spec.vm.uid:
        why = f"VM {req.spec.vm.name} was replaced by a newer one"
        return _reply(ctx, req, "", (), why, local=local)
    gone = vm is None and req.spec.vm.uid in world.gone_vms
    if gone or (vm is not None and vm.metadata.deletion_timestamp is not None):
        # KubeVirt starts nothing for a VM being deleted (pkg/virt-controller/watch/vm/vm.go
        # Controller.sync stops its VMI and returns before any start), and a set bound now
        # would only be released again, its seconds billed to the tenant.
        why = (
            f"VM {req.spec.vm.name} is being deleted"
            if vm
            else f"VM {req.spec.vm.name} was deleted"
        )
        return _reply(ctx, req, "", (), why, local=local)
    # Every live VMI of the order holds its set, the one this request was made for too: a
    # VMI of that name live already was admitted on a retry after this request's webhook
    # gave up (or its create will fail on the name), pinned to the set as it is.
    live = world.live_vmis(key)
    devs = world.devices.set_of(key)
    if devs and not live:
        # A set on a node the VMI cannot start on (cordoned, not Ready, ...) moves first:
        # admitted there, the VMI would never be scheduled, and as a live VMI it would
        # hold the set in place for good. The moves step may not have run since.
        node = set_node(devs)
        why = move_reason(world, ctx.memory.degraded, key, node, devs)
        blocked = ops.relocate(ctx, key, order, devs, node, why) if why else ""
        if blocked:
            _reply(ctx, req, "", (), blocked, local=local)
            _refuse(ctx, key, blocked)
            return
    alternatives = request_alternatives(req)
    outcome = complete(ctx, key, order, BindReason.REQUEST, not live, alternatives)
    # A set bound is the answer's once its own devices' writes are made, whatever else
    # the pass writes; a refusal counts on the room the pass's binds take, so it waits
    # for them all (its wave).
    after = ctx.plan.touched_since(mark) if outcome.ok else None
    _reply(ctx, req, outcome.node, outcome.devices, outcome.message, after, local)
    if outcome.ok:
        ctx.unsay(f"refuse/{key}")
    else:
        reason = "GPUQuotaExceeded" if outcome.quota is not None else "GPURefused"
        _refuse(ctx, key, outcome.message, reason)


def request_alternatives(req: GPUBindRequest) -> tuple[str, ...] | None:
    """The classes a bind request accepts in place of those it names; None when it
    names none (the VM's own then count, see completion.complete)."""
    named = [c for r in req.spec.requests for c in (r.alternatives or ())]
    return tuple(dict.fromkeys(named)) if named else None


def _refuse(ctx: Context, key: str, message: str, reason: str = "GPURefused") -> None:
    """The refusal, on the VM: said again only when it changed, as KubeVirt retries a
    start every few seconds and each retry asks again. The request itself is deleted by
    the webhook as soon as it has the answer, so an Event on it would be read by no one."""
    ctx.say(f"refuse/{key}", ops.vm_note(ctx, key, reason, message, warning=True))


def _reply(
    ctx: Context,
    req: GPUBindRequest,
    node: str,
    devices: tuple[str, ...],
    message: str,
    after: tuple[tuple[str, str], ...] | None = None,
    local: bool = False,
) -> None:
    phase = RequestPhase.FAILED if message else RequestPhase.BOUND
    status = req.status.model_copy(
        update={
            "phase": phase,
            "node_name": node,
            "devices": devices,
            "message": message,
            "answered_at": ctx.now,
        }
    )
    answered = req.model_copy(update={"status": status})
    if local:
        # Never an object: nothing to write, nothing left behind to delete.
        ctx.plan.write(Answer(answered), after=after)
        return
    ctx.plan.write(Status(answered), after=after)
    key = f"{req.metadata.namespace}/{req.metadata.name}"
    expiry = ctx.memory.of(RequestsMemory).expiry
    expiry.set(key, ctx.now + LEFT_AFTER_TIMEOUTS * ctx.config.bind_timeout)
