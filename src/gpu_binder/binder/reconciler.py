"""The reconciler: runs a pass for the pass key or the requests key and makes its writes.

The pass order, the two keys, the 409 abort with a fixed 100 ms requeue and the skip of
derived state after an aborted placement follow the reference reconciler (DESIGN §3).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpu_binder.api.types import (
    FINALIZER,
    LEGACY_RECORDS,
    GPUBindRequest,
    GPUDevice,
    GPUUsageRecord,
    RequestPhase,
)
from gpu_binder.binder import ledger
from gpu_binder.binder.config import Config
from gpu_binder.binder.context import Context, Memory
from gpu_binder.binder.events import MemoryRecorder, Recorder, merge
from gpu_binder.binder.metrics import Metrics
from gpu_binder.binder.plan import Note, Plan, Write
from gpu_binder.binder.queries import largest_free_set
from gpu_binder.binder.scope import Scope
from gpu_binder.binder.steps import (
    attachments,
    defrag,
    devices,
    drains,
    moves,
    orders,
    records,
    release,
    requests,
    reserved,
    sets,
    settings,
    status,
    tenantview,
)
from gpu_binder.binder.writer import Writer
from gpu_binder.binder.writes import Answer, Status
from gpu_binder.cache.world import World
from gpu_binder.client.errors import ApiError, Conflict, NotFound
from gpu_binder.client.interface import Client, WatchEvent

PASS_KEY = "gpu-binder"
REQUESTS_KEY = "gpu-binder-requests"
# Writes of a step made at once: the API server answers concurrent writes in about the
# time of one, where a burst's hundreds of binds, one round trip each, kept the bind
# requests waiting past their webhook's timeout; bounded, so a first sweep over thousands
# of devices does not flood it. 64, not 16: a burst of 100 starts was admitted with p99
# 2.9 s instead of 4.5 s (bench start, docs/CONTROLPLANE.md), the API server's own
# mutating in-flight limit being 200.
WRITES_IN_FLIGHT = 64

Step = Callable[[Context], None]


class NotLeader(Exception):
    """The lease was not renewed in time: the reconciler stops writing at once."""


@dataclass
class Result:
    requeue_after: timedelta | None = None
    writes: int = 0
    aborted: bool = False
    conflicts: int = 0
    errors: list[ApiError] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        client: Client,
        world: World,
        config: Config | None = None,
        clock: Callable[[], datetime] | None = None,
        recorder: Recorder | None = None,
        metrics: Metrics | None = None,
        is_leader: Callable[[], bool] | None = None,
        on_answer: Callable[[GPUBindRequest], None] | None = None,
    ) -> None:
        from datetime import UTC

        self.client = client
        self.world = world
        self.config = config or Config()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.recorder: Recorder = recorder or MemoryRecorder()
        self.metrics = metrics or Metrics()
        self.memory = Memory()
        self.is_leader = is_leader or (lambda: True)
        # Told a bind request's Bound answer as its write starts, its devices' binds written
        # already: this process's own webhook waiting for it admits on those durable binds,
        # a round trip before the answer's own write enters the world (webhook.answers).
        # Told every answer to an in-memory request (World.asked), once made.
        self.on_answer = on_answer
        self.last_full: datetime | None = None
        self.scope = Scope(full=True)

    async def reconcile(self, key: str, full: bool | None = None) -> Result:
        """One pass; raises the first non-conflict error so the queue backs off.

        A pass of the pass key sweeps everything once per resync (or when `full`), and
        otherwise decides only about what changed since the last pass.
        """
        now = self.clock()
        result = Result()
        if key == REQUESTS_KEY:
            if self.config.enabled:
                await self._run(requests.bind_requests, now, result)
        else:
            if full is None:
                full = (
                    self.world.needs_full
                    or self.last_full is None
                    or now - self.last_full >= self.config.resync
                )
            self.scope = Scope.take(self.world, full)
            self.scope.initial = self.last_full is None
            try:
                await self._full_pass(now, result)
            finally:
                if result.aborted or result.errors:
                    self.scope.give_back(self.world)
                elif full:
                    self.last_full = now
            self.scope = Scope(full=True)
        outcome = "error" if result.errors else "conflict" if result.aborted else "ok"
        self.metrics.passes.labels(key, outcome).inc()
        if result.errors:
            raise result.errors[0]
        if result.aborted:
            # A webhook wrote a device between our read and our write; the next pass sees
            # it. A fixed delay, unlike an error, does not grow a backoff on the one key
            # every GPU decision shares.
            result.requeue_after = self.config.conflict_retry
        elif key == REQUESTS_KEY and self.config.enabled and self._requests_waiting():
            # A pass answers up to requests_per_pass (steps.requests): the next ones now, before
            # anything else (the queue hands out the requests key first).
            result.requeue_after = timedelta(0)
        elif key == PASS_KEY and (self.config.enabled or self._awaiting_release()):
            # Grace periods expire without an event, and with the binder disabled nothing
            # watches the VMI a deleted device waits for.
            result.requeue_after = self.config.resync
            # A set held for its request's VMI goes when the wait ends (steps.sets, which
            # runs only when enabled).
            arrivals = self.memory.of(sets.SetsMemory).vmi_arrivals
            arrival = arrivals.next() if self.config.enabled else None
            if arrival is not None:
                result.requeue_after = min(
                    result.requeue_after, max(arrival - now, self.config.conflict_retry)
                )
            if self.config.enabled and self.memory.of(orders.OrdersMemory).more:
                # Past orders_per_pass (steps.orders): the next ones now, the requests
                # waiting first (the queue hands out the requests key first).
                result.requeue_after = timedelta(0)
        return result

    def _requests_waiting(self) -> bool:
        return bool(self.world.pending_requests or self.world.asked)

    def _awaiting_release(self) -> bool:
        devices = self.world.devices
        return any(FINALIZER in devices.by_name[n].metadata.finalizers for n in devices.deleted)

    async def _full_pass(self, now: datetime, result: Result) -> None:
        enabled = self.config.enabled
        if self.scope.initial:
            await self._label_unlabelled_records(now, result)
            if result.aborted:
                return
        await self._run(devices.finalizers, now, result)
        if enabled:
            await self._run(devices.classify, now, result)
            # A reservation no pass has seen yet (bound by a requests pass) has its record
            # opened before an attachment ends it: the VMI of a start may be scheduled
            # before any full pass runs, and its reserved seconds had no record at all.
            await self._run(reserved.open_reserved, now, result)
            # Attachments first: a VMI that ended detaches a Lost device, which changes
            # the set the device belongs to.
            if not result.aborted:
                await self._run(attachments.attachments, now, result)
            # A detach begins a Reserved interval that a release or a bind of this very
            # pass may end (a VM stopped and deleted while no binder ran): its record is
            # opened now, or the interval would never have one. So nothing is released
            # in a pass cut short before that: the next pass releases it.
            if not result.aborted:
                await self._run(reserved.reserved_records, now, result)
            if not result.aborted:
                await self._run(sets.sets, now, result)
        if enabled and not result.aborted:
            placement = [requests.bind_requests, moves.moves, moves.rebind_lost, orders.orders]
            # Defragmentation last: it moves stopped sets for orders the others left waiting.
            if self.config.defrag:
                placement.append(defrag.defrag)
            for step in placement:
                await self._run(step, now, result)
                if result.aborted:
                    break
        # Releasing a deleted device depends on its attachment, never on a placement, so
        # it runs even when a placement write failed.
        await self._run(release.release_deleted, now, result)
        if result.aborted:
            # Statuses in memory may hold a placement that was never written; records
            # follow the next pass's fresh read.
            return
        await self._run(records.usage_records, now, result)
        if not result.aborted:
            await self._run(reserved.reserved_records, now, result)
        if not result.aborted:
            # Only once the records it waits for are written: a VMI held for them may go.
            await self._run(records.usage_finalizers, now, result)
        if not result.aborted:
            # What each VM holds, on the VM, for its tenant (no effect on any decision).
            await self._run(tenantview.vm_annotations, now, result)
        if enabled:
            await self._run(status.class_status, now, result)
            await self._run(status.node_status, now, result)
            await self._run(drains.drains, now, result)
            await self._run(settings.settings, now, result)
            self._export()

    async def _label_unlabelled_records(self, now: datetime, result: Result) -> None:
        """A new leader's first pass: records written before the ledger namespace (an
        upgrade; binder.ledger.migration) are listed once and moved into it, labelled, so
        the watch of open records holds them and usage_records closes them; until it
        succeeds, every pass retries. Once moved, the list finds nothing."""
        try:
            listed = await self.client.list(GPUUsageRecord, label_selector=LEGACY_RECORDS)
        except ApiError as e:
            result.errors.append(e)
            result.aborted = True
            return
        ctx = self._context(now)
        remember = ledger.remember_closed(self.memory.closed_records)
        for op in ledger.migration(listed.items, self.config.ledger_namespace, remember):
            ctx.plan.write(op)
        await self._execute(ctx.plan, now, result)

    def _export(self) -> None:
        degraded = self.memory.degraded
        largest = {c: largest_free_set(self.world, degraded, c) for c in self.world.classes}
        unmanaged = len(self.memory.of(attachments.AttachmentsMemory).unadopted)
        self.metrics.export(
            self.world,
            largest,
            unmanaged,
            len(self.memory.waiting.unplaceable),
            degraded_nodes=len(self.memory.degraded),
        )

    def _context(self, now: datetime) -> Context:
        return Context(self.world, self.config, now, self.memory, Plan(self.world, now), self.scope)

    async def _run(self, step: Step, now: datetime, result: Result) -> None:
        ctx = self._context(now)
        step(ctx)
        await self._execute(ctx.plan, now, result)

    async def _execute(self, plan: Plan, now: datetime, result: Result) -> None:
        if not plan.writes and not plan.notes:
            return  # most steps of a pass decide nothing: no write to make, no Event to tell
        notes: list[Note] = []
        try:
            await self._write_all(plan, result, notes)
        finally:
            # Only decisions that were written are told, one Event per decision.
            for note in merge(notes):
                await self.recorder.record(note, now)

    async def _write_all(self, plan: Plan, result: Result, notes: list[Note]) -> None:
        """Make the plan's writes, WRITES_IN_FLIGHT at a time, wave by wave (Plan.waves):
        binds, then the other device writes, then the rest, so a bind refused stops the
        releases of its move. A write made after others (a request's answer after its own
        devices, Plan.after_deps) goes as soon as they are written, ahead of the writes
        still waiting: a pass of a few dozen answers sends the first after two round trips,
        not after every bind of the pass.

        The first conflict or error starts no more writes: those in flight finish (and
        enter the world), every write not made is un-staged. Writes of one wave touch
        distinct objects, and no decision of a step depends on the order of its writes.
        """
        items = list(plan.writes.values())
        written: set[int] = set()
        deps = plan.after_deps()
        unlocks: dict[int, list[int]] = {}
        for i, waits in deps.items():
            for d in waits:
                unlocks.setdefault(d, []).append(i)
        waves = plan.waves()
        ready = [i for i, waits in deps.items() if not waits]
        if ready:
            waves = [ready + waves[0], *waves[1:]] if waves else [ready]
        try:
            for wave in waves:
                if await self._write_wave(items, wave, result, written, (deps, unlocks)):
                    break
        finally:
            self._revert([w for i, w in enumerate(items) if i not in written])
            for w in items:
                if isinstance(w.obj, GPUDevice):
                    self.world.staged.discard(w.obj.metadata.name)
            for i, w in enumerate(items):
                if i in written:
                    notes.extend(w.notes)
        if len(written) == len(items):
            notes.extend(plan.notes)

    async def _write_wave(
        self,
        items: list[Write],
        wave: list[int],
        result: Result,
        written: set[int],
        after: tuple[dict[int, set[int]], dict[int, list[int]]] = ({}, {}),
    ) -> bool:
        """One wave's writes, and the writes made after them (`after`: what each waits
        for, and whom each write unlocks); True when a conflict or an error stopped it
        (NotLeader is raised once the writes in flight have finished)."""
        stop: list[str] = []  # why this wave starts no more writes (an earlier step's
        # abort does not stop this one's: release runs after a placement conflict)
        deps, unlocks = after
        ready = deque(wave)
        in_flight = 0
        changed = asyncio.Event()
        writer = Writer(self.client, self.world)  # the client as it is now (tests swap it)

        async def one(i: int) -> None:
            if not self.is_leader():
                stop.append("lease")
                return
            w = items[i]
            if self.on_answer is not None and i in deps and _bound_answer(w):
                self.on_answer(w.obj)
            try:
                made = await writer.make(w.op)
            except NotFound:
                if _answer_of_a_gone_request(w):
                    # Its webhook gave up waiting (bind timeout) and deleted it: nobody
                    # reads this answer, and the devices bound for it stay the VM's. No
                    # conflict: the step's other answers and placements are written.
                    self.world.apply(WatchEvent("DELETED", w.obj))
                    written.add(i)
                    return
                stop.append("conflict")
                self._conflict(result)
                return
            except Conflict:
                stop.append("conflict")
                self._conflict(result)
                return
            except ApiError as e:
                stop.append("error")
                result.errors.append(e)
                result.aborted = True
                return
            written.add(i)
            if isinstance(w.op, Answer):
                self._told(w.obj)
                return
            result.writes += 1
            self.metrics.writes.labels(w.op.VERB).inc()
            if made is not None:
                # Write-through: the response enters the cache before the next decision.
                self.world.apply(WatchEvent("MODIFIED", made))
                if isinstance(made, GPUDevice):
                    # As the API server holds it (World.written_device), for the webhook.
                    name = made.metadata.name
                    self.world.written[name] = made.metadata.resource_version
                    self.world.staged.discard(name)

        async def worker() -> None:
            nonlocal in_flight
            while not stop:
                if not ready:
                    if not in_flight:
                        return
                    changed.clear()
                    await changed.wait()  # a write in flight may unlock another
                    continue
                i = ready.popleft()
                in_flight += 1
                try:
                    await one(i)
                finally:
                    in_flight -= 1
                if i in written:
                    for j in unlocks.get(i, ()):
                        waits = deps[j]
                        waits.discard(i)
                        if not waits:
                            ready.appendleft(j)  # ahead of the wave's writes not started
                changed.set()

        if len(ready) == 1 and not unlocks:
            # Nothing to overlap a lone write with: awaited here, without a task for it.
            await one(ready[0])
        else:
            await asyncio.gather(*(worker() for _ in range(min(WRITES_IN_FLIGHT, len(ready)))))
        if "lease" in stop:
            raise NotLeader("lease lost: no more writes")
        return bool(stop)

    def _told(self, answered: GPUBindRequest) -> None:
        """An in-memory request's answer made (binder.writes.Answer): it leaves World.asked,
        so no later pass answers it again, and goes to the webhook waiting for it."""
        meta = answered.metadata
        self.world.asked.pop(f"{meta.namespace}/{meta.name}", None)
        if self.on_answer is not None:
            self.on_answer(answered)

    def _conflict(self, result: Result) -> None:
        self.metrics.conflicts.inc()
        result.conflicts += 1
        result.aborted = True

    def _revert(self, unwritten: list[Write]) -> None:
        for w in reversed(unwritten):
            if not isinstance(w.obj, GPUDevice):
                continue
            name = w.obj.metadata.name
            # Its write failed or was never made (a 409: someone wrote it since): the
            # webhook reads it from the API server again.
            self.world.written.pop(name, None)
            if self.world.devices.get(name) is not w.obj:
                continue  # an event replaced the staged decision already
            if w.before is None:
                self.world.devices.remove(name)
            else:
                self.world.put_device(w.before)


def _bound_answer(w: Write) -> bool:
    """A request's Bound answer, made after its own devices' writes (Plan.after_deps)."""
    obj = w.obj
    return (
        isinstance(w.op, Status)
        and isinstance(obj, GPUBindRequest)
        and obj.status.phase == RequestPhase.BOUND
    )


def _answer_of_a_gone_request(w: Write) -> bool:
    return isinstance(w.op, Status) and isinstance(w.obj, GPUBindRequest)
