"""The webhook's decision (DESIGN §4): admit a starting VMI pinned to its VM's GPU set.

`decide` and `answer` are the two halves without I/O, for the embedded cluster's
discrete-event driver, which answers the bind request itself; `admit` joins them with a
real bind request and a watch bounded by `bindTimeout` (see webhook.bindrequest). The
webhook reads the world and creates requests; it never writes a device (DESIGN §2,
invariant 5).

A complete set is pinned at once only where its VMI can start: a set the binder's move
rule sends elsewhere (its node cordoned, not Ready, gone or degraded, a device of it
unschedulable, or its VM asking for another node) goes the request's way, and the binder
moves it before answering. Pinned where it is, the VMI would never be scheduled, and as a
live VMI it would hold the set there for good.

In the leader (the process whose reconciler writes device status), a request is no object:
it is handed to that reconciler in memory (World.asked), answered in the requests step's
line by the same rules, and the VMI admitted on the answer told once its binds are written
(`_ask_here`); a create, an answer write and a delete fewer per start, and no round trip
through the API server and the watch. Should the process stop leading first, the
admission is refused (KubeVirt retries) and the binds written stay its VM's.

A dry run creates nothing. With a complete set that may stay it gets the real patch;
otherwise it is admitted unpinned, with a warning naming what a real create would ask the
binder for: denying it would predict a failure the real create, which can ask, might not
have.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from gpu_binder.api.slots import device_slot
from gpu_binder.api.types import (
    CLASSES_ANNOTATION,
    GPUBindRequest,
    GPUDevice,
    Phase,
    RequestPhase,
)
from gpu_binder.binder import Config, move_reason, reported_degraded, served_twice
from gpu_binder.cache.world import World
from gpu_binder.client.errors import NotFound
from gpu_binder.client.interface import Client
from gpu_binder.webhook import bindrequest
from gpu_binder.webhook.answers import Answer, Answers
from gpu_binder.webhook.messages import (
    dry_run_warning,
    named_like_a_vm,
    timeout_message,
)
from gpu_binder.webhook.patch import pin_patch
from gpu_binder.webhook.pinning import (
    Incomplete,
    Order,
    Pinning,
    Refused,
    counts,
    foreign_message,
    foreign_slots,
    gpu_entries,
    order_of,
    pin,
    slot_resource_limits,
    with_alternatives,
)
from gpu_binder.webhook.review import AdmissionRequest, allowed, denied, parse_review
from gpu_binder.webhook.target import Target, target_of, vmi_name

log = logging.getLogger(__name__)

VMI_KIND = "VirtualMachineInstance"
_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Respond:
    """The decision is final: send this AdmissionReview response."""

    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NeedsRequest:
    """The VM's set is incomplete, or must move before its VMI can start: create this
    request and `answer` once the binder has."""

    request: GPUBindRequest


@dataclass(frozen=True, slots=True)
class Pinned:
    """The set is complete in this replica's world: pin the VMI to it (`response`), once
    the API server is seen to hold those devices bound to the VM; else `fallback`, the
    request's way (module docstring)."""

    response: dict[str, Any]
    pinning: Pinning
    target: Target
    # Made only when needed: a request's name draws from the rng, which in the embedded
    # cluster must draw as often as before.
    fallback: Callable[[], Respond | NeedsRequest]


Decision = Respond | NeedsRequest


class Admitter:
    """Decides AdmissionReviews of VirtualMachineInstance CREATE from the binder's world."""

    def __init__(
        self,
        world: World,
        client: Client,
        config: Config | None = None,
        clock: Callable[[], datetime] | None = None,
        *,
        rng: random.Random | None = None,
        answers: Answers | None = None,
        leading: Callable[[], bool] | None = None,
        ask_here: Callable[[], None] | None = None,
    ) -> None:
        self.world = world
        self.client = client
        # Whether this process leads, so that the devices its own writes returned are as
        # the API server holds them (World.written_device); None: always read them.
        self.leading = leading
        # The answers this process's world receives (webhook.answers); None: each
        # admission watches its own request (a world fed by no watch of requests).
        self.answers = answers
        # Wakes this process's reconciler for a request handed to it in memory while it
        # leads (`_ask_here`); None: every request is a GPUBindRequest object.
        self.ask_here = ask_here
        self.config = config or Config()
        # Only measures how long an admission waited, in the log; waiting uses the loop.
        self.clock = clock or (lambda: datetime.now(UTC))
        # Request name suffixes; seeded in the embedded cluster so runs repeat.
        self.rng = rng or random.Random()
        # Answered bind requests still being deleted: a reply does not wait for that.
        self._forgetting: set[asyncio.Task[None]] = set()

    # --- the whole admission, with waiting -----------------------------------------

    async def admit(self, review: object) -> dict[str, Any]:
        """The AdmissionReview response for a review; never raises past parsing.

        Raises BadReview for a body that is no AdmissionReview v1 request (the server
        answers HTTP 400 with its reason); any other failure denies the VMI, and KubeVirt
        retries the start.
        """
        request = parse_review(review)
        try:
            decided = self._decide(request)
            if isinstance(decided, Pinned):
                if await self._written(decided):
                    return decided.response
                decided = decided.fallback()
            if isinstance(decided, Respond):
                return decided.response
            return await self._ask(request, decided.request)
        except Exception as e:
            return self._failed(request, e)

    # --- the two halves, without I/O -----------------------------------------------

    def decide(self, review: object) -> Decision:
        """Respond now, or ask for the bind request the binder must answer first.

        `review` is an AdmissionReview dict or an already parsed AdmissionRequest. Raises
        BadReview for malformed input, nothing else.
        """
        request = review if isinstance(review, AdmissionRequest) else parse_review(review)
        try:
            decided = self._decide(request)
        except Exception as e:
            return Respond(self._failed(request, e))
        # The embedded cluster's world holds only what was written: pinned as it says.
        return Respond(decided.response) if isinstance(decided, Pinned) else decided

    def answer(
        self,
        review: object,
        bind_request: GPUBindRequest,
        devices: Mapping[str, GPUDevice] | None = None,
    ) -> dict[str, Any]:
        """The response once the binder answered `bind_request` (Pending counts as timeout).

        Devices are read from `devices` when given, else from the world.
        """
        request = review if isinstance(review, AdmissionRequest) else parse_review(review)
        try:
            return self._answer(request, bind_request, devices or self.world.devices.by_name)
        except Exception as e:
            return self._failed(request, e)

    # --- deciding --------------------------------------------------------------------

    def _decide(self, request: AdmissionRequest) -> Decision | Pinned:
        uid, vmi = request.uid, request.object
        if request.operation != "CREATE" or request.kind != VMI_KIND or vmi is None:
            return Respond(allowed(uid))
        entries = gpu_entries(vmi)
        limits = slot_resource_limits(vmi)
        if not entries and not limits:
            return Respond(allowed(uid))
        order = order_of(entries, self.world.class_by_resource)
        if not order and not limits:
            return Respond(allowed(uid))
        if limits:
            # No VMI needs a slot resource there: the webhook pins through entries alone.
            return Respond(self._deny(request, foreign_message(limits)))
        # An excluded namespace is spared the pinning, not the refusal of slots that are
        # not its VMI's own: slot names repeat on every node and reach any tenant's GPU.
        excluded = request.namespace in self.config.excluded_namespaces
        if excluded and not order.slots:
            return Respond(allowed(uid))
        target = target_of(request)
        if isinstance(target, str):
            return Respond(denied(uid, target))
        if not target.owned and target.key in self.world.vms:
            return Respond(self._deny(request, named_like_a_vm(target)))
        have = self._current_set(target)
        if excluded:
            foreign = foreign_slots(order, have)
            if foreign:
                return Respond(self._deny(request, foreign_message(foreign)))
            return Respond(allowed(uid))
        alternatives = self._alternatives(target, vmi)
        order = with_alternatives(order, alternatives, have)
        foreign = foreign_slots(order, have)
        if foreign:
            return Respond(self._deny(request, foreign_message(foreign)))
        twice = served_twice(self.world, self.config)
        refused = sorted(c for c in counts(order, have) if c in twice)
        if refused:
            # The binder refuses to serve it: KubeVirt serves its GPUs as a pool too.
            return Respond(
                self._deny(request, f"GPU class {refused[0]} is not served: {twice[refused[0]]}")
            )
        outcome = pin(order, have, self.world.classes)
        if isinstance(outcome, Refused):
            return Respond(self._deny(request, outcome.message))
        move = ""
        if isinstance(outcome, Pinning):
            # A set its VMI cannot start beside goes the request's way: the binder moves
            # it first. Disabled, it moves nothing, and the VMI starts once the node can.
            move = self._move_reason(target, outcome.node, have) if self.config.enabled else ""
            if not move:
                response = allowed(uid, pin_patch(vmi, outcome))
                if request.dry_run:
                    return Respond(response)  # nothing is created: the cache's word will do
                fallback = partial(self._ask_binder, request, target, order, have, alternatives, "")
                return Pinned(response, outcome, target, fallback)
        return self._ask_binder(request, target, order, have, alternatives, move)

    def _ask_binder(
        self,
        request: AdmissionRequest,
        target: Target,
        order: Order,
        have: list[GPUDevice],
        alternatives: tuple[str, ...],
        move: str,
    ) -> Decision:
        """The bind request for what the VMI needs of its set (or the warning of a dry run,
        or the refusal of a disabled binder, which binds nothing)."""
        uid = request.uid
        wanted = counts(order, have)
        if request.dry_run:
            # A dry run may create nothing, so it cannot ask the binder (module docstring).
            warning = dry_run_warning(wanted, self.config, move)
            return Respond(allowed(uid, warnings=[warning]))
        if not self.config.enabled:
            return Respond(
                self._deny(
                    request,
                    "gpu-binder is disabled, so no GPUs are bound to this VM; KubeVirt will retry",
                )
            )
        name = bindrequest.request_name(target.vmi_name, self.rng)
        return NeedsRequest(bindrequest.bind_request(target, wanted, name, alternatives))

    def _move_reason(self, target: Target, node: str, devices: list[GPUDevice]) -> str:
        """Why the binder moves this complete set off `node` before a VMI may start on it,
        or "": its own rule (binder.move_reason), which its request path relocates by.

        Pinned there anyway, the VMI would never be scheduled, and as a live VMI it would
        hold the set in place. While another VMI of the VM is live, the binder moves
        nothing and answers with the set as it is, so the VMI is pinned at once.
        """
        live = self.world.live_vmis(target.key)
        if any(v.metadata.name != target.vmi_name for v in live):
            return ""
        # The binder's memory of degraded nodes is the leader's; any replica reads it
        # from the GPUDegraded condition the binder sets on the node with it.
        found = self.world.nodes.get(node)
        degraded = {node} if found is not None and reported_degraded(found) else set()
        return move_reason(self.world, degraded, target.key, node, devices)

    def _alternatives(self, target: Target, vmi: Mapping[str, Any]) -> tuple[str, ...]:
        """Classes the order accepts in place of those its entries name: its VM's, else
        the VMI's own (a standalone VMI, or a VM the webhook's cache has not seen yet)."""
        alternatives = self.world.alternatives_of(target.key) if target.owned else ()
        if not alternatives:
            meta = vmi.get("metadata")
            annotations = meta.get("annotations") if isinstance(meta, dict) else None
            value = annotations.get(CLASSES_ANNOTATION) if isinstance(annotations, dict) else None
            if isinstance(value, str):
                names = (n.strip() for n in value.split(","))
                alternatives = tuple(dict.fromkeys(n for n in names if n in self.world.classes))
        return alternatives

    def _current_set(self, target: Target) -> list[GPUDevice]:
        """The order's set as the binder holds it: not Lost, and bound to this very order.

        A VM's by its uid; a standalone VMI has none at admission (the API server gives it
        one after), so a set bound under any uid is another object's: an earlier VMI's of
        its name, once the binder saw it."""
        return [
            d
            for d in self.world.devices.set_of(target.key)
            if d.status.phase != Phase.LOST
            and d.status.binding is not None
            and target.bound_to_it(d.status.binding.vm.uid)
        ]

    def _answer(
        self,
        request: AdmissionRequest,
        bind_request: GPUBindRequest,
        devices: Mapping[str, GPUDevice],
    ) -> dict[str, Any]:
        status = bind_request.status
        if status.phase == RequestPhase.FAILED:
            return self._deny(request, status.message or "gpu-binder could not bind the GPUs")
        if status.phase != RequestPhase.BOUND:
            return self._deny(request, timeout_message(self.config))
        answered: list[GPUDevice] = []
        for name in status.devices:
            d = devices.get(name)
            if d is None:
                return self._deny(
                    request,
                    f"GPU {name} bound by gpu-binder is not known to the webhook yet; "
                    "KubeVirt will retry",
                )
            answered.append(d)
        vmi = request.object or {}
        order: Order = order_of(gpu_entries(vmi), self.world.class_by_resource)
        target = target_of(request)
        if not isinstance(target, str):
            gone = [d.metadata.name for d in answered if not _bound_to(target, d)]
            if gone:
                # Released or moved since the answer (the VM deleted, a move): pinned to
                # them, the VMI would hold another VM's GPUs.
                return self._deny(
                    request,
                    f"GPU {gone[0]} that gpu-binder answered with is no longer bound to "
                    f"{target.key}; KubeVirt will retry",
                )
            order = with_alternatives(order, self._alternatives(target, vmi), answered)
        foreign = foreign_slots(order, answered)
        if foreign:
            return self._deny(request, foreign_message(foreign))
        outcome = pin(order, answered, self.world.classes)
        if isinstance(outcome, Refused):
            return self._deny(request, outcome.message)
        if isinstance(outcome, Incomplete) or (
            status.node_name and outcome.node != status.node_name
        ):
            why = (
                outcome.reason
                if isinstance(outcome, Incomplete)
                else (f"its devices are on {outcome.node}, not {status.node_name}")
            )
            return self._deny(
                request, f"gpu-binder's answer does not fit the VMI: {why}; KubeVirt will retry"
            )
        return allowed(request.uid, pin_patch(vmi, outcome))

    # --- reading past the cache -----------------------------------------------------

    async def _written(self, pinned: Pinned) -> bool:
        """Whether the API server holds the pinned devices as the world does: bound to the
        VM, on the node, at the slots the patch names, not Lost.

        The world may be ahead of the API server (the leader's staged decisions, written
        one by one, of which a 409 un-stages the rest) or behind it (another replica's
        watch, not yet showing a move): pinned from either, the VMI would hold slots its
        VM does not, which the binder gives to another VM. Read past it, the set is as
        durable as the pod webhook's pin; a set that differs goes the request's way, and
        the binder answers only after its own device writes.
        """
        names = pinned.pinning.devices
        fresh = await asyncio.gather(*(self._read_device(n) for n in names))
        for name, d in zip(names, fresh, strict=True):
            cached = self.world.devices.get(name)
            if (
                d is None
                or cached is None
                or not _bound_to(pinned.target, d)
                or d.status.phase == Phase.LOST
                or d.spec.node_name != pinned.pinning.node
                or device_slot(d) != device_slot(cached)
            ):
                return False
        return True

    async def _read_device(self, name: str) -> GPUDevice | None:
        """The device as the API server holds it: this leader's own last write of it when
        the world still holds that (World.written_device), else read. A burst's every
        admission read its set's devices once or twice, each retry again, while the
        leader had just written them and the API server answered slowest."""
        if self.leading is not None and self.leading():
            own = self.world.written_device(name)
            if own is not None:
                return own
        try:
            return await self.client.get(GPUDevice, name)
        except NotFound:
            return None

    async def _answered_devices(self, answered: GPUBindRequest) -> dict[str, GPUDevice]:
        """The answered devices as the API server holds them. The binder writes its answer
        after the devices, so a read now sees them bound; the world may not: another
        replica's watch lags, and the leader's own world holds what its pass staged since."""
        names = answered.status.devices
        read = await asyncio.gather(*(self._read_device(n) for n in names))
        return {n: d for n, d in zip(names, read, strict=True) if d is not None}

    # --- asking the binder -----------------------------------------------------------

    async def _ask(self, request: AdmissionRequest, bind_request: GPUBindRequest) -> dict[str, Any]:
        if (
            self.ask_here is not None
            and self.answers is not None
            and self.leading is not None
            and self.leading()
        ):
            return await self._ask_here(request, bind_request, self.answers, self.ask_here)
        started = self.clock()
        created: GPUBindRequest | None = None
        outcome: Answer | Literal["timeout"] = "timeout"
        reusable = _reusable(bind_request)
        try:
            async with asyncio.timeout(self.config.bind_timeout.total_seconds()):
                created = self._outstanding(bind_request) if reusable else None
                if created is None:
                    created = await bindrequest.create(self.client, bind_request, self.rng)
                if created.status.phase != RequestPhase.PENDING:
                    outcome = created
                elif self.answers is not None:
                    meta = created.metadata
                    current = self.world.requests.get(f"{meta.namespace}/{meta.name}")
                    outcome = await self.answers.wait(created, current)
                else:
                    outcome = await bindrequest.wait_for_answer(self.client, created)
        except TimeoutError:
            outcome = "timeout"
        finally:
            # A VM's request the binder has not answered yet stays for KubeVirt's retry of
            # this start, which waits for its answer (`_outstanding`) instead of creating
            # another: a burst answered slower than the bind timeout otherwise had every
            # retry create, and the binder answer, one more request, while the one before
            # was deleted unread. If no retry comes, it goes with its VM, or the binder
            # deletes it once answered (steps.requests).
            if created is not None and not (reusable and outcome == "timeout"):
                self._forget_later(created)
        log.info(
            "VMI %s/%s: bind request %s answered %s after %s",
            request.namespace,
            vmi_name(request),
            (created or bind_request).metadata.name,
            outcome if isinstance(outcome, str) else outcome.status.phase.value,
            self.clock() - started,
        )
        if outcome == "deleted":
            return self._deny(
                request,
                "the bind request was deleted before gpu-binder answered (was the VM "
                "deleted?); KubeVirt will retry",
            )
        if isinstance(outcome, str):
            return self._deny(request, timeout_message(self.config))
        devices = await self._answered_devices(outcome)
        return self._answer(request, outcome, devices)

    async def _ask_here(
        self,
        request: AdmissionRequest,
        bind_request: GPUBindRequest,
        answers: Answers,
        wake: Callable[[], None],
    ) -> dict[str, Any]:
        """The leader's own request, handed to its reconciler in memory (World.asked), not
        created: the requests step answers it as it would the object, under the same lease
        and after its binds are written (binder.writes.Answer), and tells `answers`.

        A timed-out VM's request stays for KubeVirt's retry to wait on, as the object's
        does (`_outstanding`); any other unanswered one is withdrawn. Leadership lost
        before the answer abandons it (kube.manager): refused, never bound by another."""
        started = self.clock()
        reusable = _reusable(bind_request)
        asked = self._outstanding(bind_request, self.world.asked) if reusable else None
        if asked is None:
            asked = bindrequest.in_memory(bind_request, self.clock())
            self.world.asked[_request_key(asked)] = asked
            wake()
        outcome: Answer | Literal["timeout"] = "timeout"
        try:
            async with asyncio.timeout(self.config.bind_timeout.total_seconds()):
                outcome = await answers.wait(asked, None)
        except TimeoutError:
            outcome = "timeout"
        finally:
            if outcome == "timeout" and not reusable:
                self.world.asked.pop(_request_key(asked), None)
        log.info(
            "VMI %s/%s: bind request %s answered %s after %s",
            request.namespace,
            vmi_name(request),
            asked.metadata.name,
            outcome if isinstance(outcome, str) else outcome.status.phase.value,
            self.clock() - started,
        )
        if outcome == "abandoned":
            return self._deny(
                request,
                "gpu-binder's leader changed before it answered; KubeVirt will retry",
            )
        if isinstance(outcome, str):
            return self._deny(request, timeout_message(self.config))
        devices = await self._answered_devices(outcome)
        return self._answer(request, outcome, devices)

    def _outstanding(
        self, wanted: GPUBindRequest, among: Mapping[str, GPUBindRequest] | None = None
    ) -> GPUBindRequest | None:
        """The VM's request for this very start still waiting for the binder's answer, as
        the world holds it (`among`: those handed over in memory instead): an earlier
        attempt's, left when its webhook timed out. Same VM (by uid), same VMI name, same
        order; the oldest when there are several."""
        spec = wanted.spec
        requests = self.world.requests
        # The pending ones only, and the uid compared first: this runs for every admission
        # of a burst, over every request of it (a full comparison of all took a quarter of
        # the process's time in bench start).
        candidates = (
            among.values()
            if among is not None
            else (r for key in self.world.pending_requests if (r := requests.get(key)))
        )
        found = [
            r
            for r in candidates
            if r.spec.vm.uid == spec.vm.uid
            and r.metadata.namespace == wanted.metadata.namespace
            and r.metadata.deletion_timestamp is None
            and r.spec == spec
        ]
        if not found:
            return None
        return min(found, key=lambda r: (r.metadata.creation_timestamp or _NEVER, r.metadata.name))

    def _forget_later(self, created: GPUBindRequest) -> None:
        """Delete the answered request after replying: the answer is read already, and a
        timeout's denial must reach the API server before its own webhook deadline, not one
        round trip later."""
        task = asyncio.get_running_loop().create_task(bindrequest.forget(self.client, created))
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    async def drain(self) -> None:
        """Wait for the deletions of answered requests still under way (at shutdown)."""
        while self._forgetting:
            await asyncio.gather(*self._forgetting, return_exceptions=True)

    # --- answering -------------------------------------------------------------------

    def _deny(self, request: AdmissionRequest, message: str) -> dict[str, Any]:
        log.info("VMI %s/%s denied: %s", request.namespace, vmi_name(request), message)
        return denied(request.uid, message)

    def _failed(self, request: AdmissionRequest, error: Exception) -> dict[str, Any]:
        log.exception("VMI %s/%s: the webhook failed", request.namespace, vmi_name(request))
        return denied(
            request.uid,
            f"gpu-binder's webhook failed ({type(error).__name__}: {error}); KubeVirt will retry",
        )


def _request_key(request: GPUBindRequest) -> str:
    return f"{request.metadata.namespace}/{request.metadata.name}"


def _reusable(bind_request: GPUBindRequest) -> bool:
    """Whether a retry of the start may wait for this request's answer: a VM's, known by
    uid. A standalone VMI's name may be taken by another object between two attempts."""
    vm = bind_request.spec.vm
    return bool(vm.uid) and bool(bind_request.metadata.owner_references)


def _bound_to(target: Target, d: GPUDevice) -> bool:
    """Whether d is bound to the order the VMI runs for (by key, and uid where known)."""
    b = d.status.binding
    return b is not None and b.vm.key == target.key and target.bound_to_it(b.vm.uid)
