"""The webhook's decision (DESIGN §4): admit a starting VMI pinned to its VM's GPU set.

`decide` and `answer` are the two halves without I/O, for the embedded cluster's
discrete-event driver, which answers the bind request itself; `admit` joins them with a
real bind request and a watch bounded by `bindTimeout`. The webhook reads the world and
creates requests; it never writes a device (DESIGN §2, invariant 5).

A dry run creates nothing. With a complete set it gets the real patch; otherwise it is
admitted unpinned, with a warning naming what a real create would ask the binder for:
denying it would predict a failure the real create, which can ask, might not have.
"""

from __future__ import annotations

import asyncio
import logging
import random
import string
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from gpu_binder.api.meta import ObjectMeta, OwnerReference
from gpu_binder.api.types import (
    CLASSES_ANNOTATION,
    ClassCount,
    GPUBindRequest,
    GPUBindRequestSpec,
    GPUDevice,
    NameRef,
    Phase,
    RequestPhase,
    VMRef,
)
from gpu_binder.binder.config import Config
from gpu_binder.binder.world import World
from gpu_binder.client.errors import AlreadyExists, Gone, NotFound
from gpu_binder.client.interface import Client, WatchEvent
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

log = logging.getLogger(__name__)

VMI_KIND = "VirtualMachineInstance"
VM_KIND = "VirtualMachine"
KUBEVIRT_API_VERSION = "kubevirt.io/v1"
# How long to wait before watching again after a watch stream ended early.
REWATCH_DELAY = 0.05
_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
_NAME_MAX = 253


@dataclass(frozen=True, slots=True)
class Respond:
    """The decision is final: send this AdmissionReview response."""

    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NeedsRequest:
    """The VM's set is incomplete: create this request and `answer` once the binder has."""

    request: GPUBindRequest


Decision = Respond | NeedsRequest


@dataclass(frozen=True, slots=True)
class Target:
    """The order a starting VMI runs for: its VirtualMachine, or the VMI itself."""

    namespace: str
    vm_name: str
    # Empty for a standalone VMI: the API server gives it a uid only after admission.
    vm_uid: str
    vmi_name: str
    owned: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.vm_name}"


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
    ) -> None:
        self.world = world
        self.client = client
        self.config = config or Config()
        # Only measures how long an admission waited, in the log; waiting uses the loop.
        self.clock = clock or (lambda: datetime.now(UTC))
        # Request name suffixes; seeded in the embedded cluster so runs repeat.
        self.rng = rng or random.Random()

    # --- the whole admission, with waiting -----------------------------------------

    async def admit(self, review: object) -> dict[str, Any]:
        """The AdmissionReview response for a review; never raises past parsing.

        Raises BadReview for a body that is no AdmissionReview v1 request (the server
        answers HTTP 400 with its reason); any other failure denies the VMI, and KubeVirt
        retries the start.
        """
        request = parse_review(review)
        try:
            decision = self._decide(request)
            if isinstance(decision, Respond):
                return decision.response
            return await self._ask(request, decision.request)
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
            return self._decide(request)
        except Exception as e:
            return Respond(self._failed(request, e))

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

    def _decide(self, request: AdmissionRequest) -> Decision:
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
        if request.namespace in self.config.excluded_namespaces:
            return Respond(allowed(uid))
        if limits:
            return Respond(self._deny(request, foreign_message(limits)))
        target = target_of(request)
        if isinstance(target, str):
            return Respond(denied(uid, target))
        have = self._current_set(target)
        alternatives = self._alternatives(target, vmi)
        order = with_alternatives(order, alternatives, have)
        foreign = foreign_slots(order, have)
        if foreign:
            return Respond(self._deny(request, foreign_message(foreign)))
        outcome = pin(order, have, self.world.classes)
        if isinstance(outcome, Pinning):
            return Respond(allowed(uid, pin_patch(vmi, outcome)))
        if isinstance(outcome, Refused):
            return Respond(self._deny(request, outcome.message))
        wanted = counts(order, have)
        if request.dry_run:
            # A dry run may create nothing, so it cannot ask the binder (module docstring).
            return Respond(allowed(uid, warnings=[_dry_run_warning(wanted, self.config)]))
        if not self.config.enabled:
            return Respond(
                self._deny(
                    request,
                    "gpu-binder is disabled, so no GPUs are bound to this VM; KubeVirt will retry",
                )
            )
        return NeedsRequest(self._bind_request(target, wanted, alternatives))

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
        """The VM's set as the binder holds it: not Lost, and bound to this very VM."""
        return [
            d
            for d in self.world.devices.set_of(target.key)
            if d.status.phase != Phase.LOST
            and not (
                target.vm_uid
                and d.status.binding is not None
                and d.status.binding.vm.uid
                and d.status.binding.vm.uid != target.vm_uid
            )
        ]

    def _bind_request(
        self, target: Target, wanted: Mapping[str, int], alternatives: tuple[str, ...] = ()
    ) -> GPUBindRequest:
        owners: tuple[OwnerReference, ...] = ()
        if target.owned and target.vm_uid:
            # Not the controller: the VM controller owns its VMIs, and a request is only
            # garbage-collected with the VM, not managed by it.
            owners = (
                OwnerReference(
                    api_version=KUBEVIRT_API_VERSION,
                    kind=VM_KIND,
                    name=target.vm_name,
                    uid=target.vm_uid,
                    controller=False,
                    block_owner_deletion=False,
                ),
            )
        return GPUBindRequest(
            metadata=ObjectMeta(
                name=self._request_name(target.vmi_name),
                namespace=target.namespace,
                owner_references=owners,
            ),
            spec=GPUBindRequestSpec(
                vm=VMRef(name=target.vm_name, uid=target.vm_uid),
                vmi=NameRef(name=target.vmi_name),
                requests=tuple(
                    ClassCount(
                        class_name=c,
                        count=n,
                        alternatives=alternatives if c in alternatives else None,
                    )
                    for c, n in sorted(wanted.items())
                    if c and n
                ),
            ),
        )

    def _request_name(self, vmi_name: str) -> str:
        """`<vmi name>-<5 random>`, as generateName would, which the in-memory API lacks."""
        suffix = "".join(self.rng.choices(_SUFFIX_ALPHABET, k=5))
        base = vmi_name[: _NAME_MAX - len(suffix) - 1].rstrip("-.")
        return f"{base}-{suffix}"

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

    # --- asking the binder -----------------------------------------------------------

    async def _ask(self, request: AdmissionRequest, bind_request: GPUBindRequest) -> dict[str, Any]:
        started = self.clock()
        created: GPUBindRequest | None = None
        outcome: GPUBindRequest | Literal["timeout", "deleted"] = "timeout"
        try:
            async with asyncio.timeout(self.config.bind_timeout.total_seconds()):
                created = await self._create(bind_request)
                outcome = (
                    created
                    if created.status.phase != RequestPhase.PENDING
                    else await self._wait(created)
                )
        except TimeoutError:
            outcome = "timeout"
        finally:
            if created is not None:
                await self._forget(created)
        log.info(
            "VMI %s/%s: bind request %s answered %s after %s",
            request.namespace,
            _vmi_name(request),
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
        return self._answer(request, outcome, await self._devices(outcome))

    async def _create(self, bind_request: GPUBindRequest) -> GPUBindRequest:
        """Create the request, drawing a new name suffix if the random one was taken."""
        for _ in range(3):
            try:
                return await self.client.create(bind_request)
            except AlreadyExists:
                meta = bind_request.metadata.model_copy(
                    update={"name": self._request_name(bind_request.spec.vmi.name)}
                )
                bind_request = bind_request.model_copy(update={"metadata": meta})
        return await self.client.create(bind_request)

    async def _wait(self, created: GPUBindRequest) -> GPUBindRequest | Literal["deleted"]:
        """Watch the request from its creation until the binder answers it or it is deleted."""
        meta = created.metadata
        rv = meta.resource_version
        while True:
            stream = self.client.watch(GPUBindRequest, meta.namespace, resource_version=rv)
            try:
                async for event in stream:
                    if event.type == "BOOKMARK":
                        rv = event.object.metadata.resource_version or rv
                        continue
                    seen = _answered(event, meta.name)
                    rv = event.object.metadata.resource_version or rv
                    if seen is not None:
                        return seen
            except Gone:
                pass  # resumed too late: read the request itself below
            finally:
                await _close(stream)
            # The stream ended early (a dropped connection): read past it, then resume.
            try:
                current = await self.client.get(GPUBindRequest, meta.name, meta.namespace)
            except NotFound:
                return "deleted"
            if current.status.phase != RequestPhase.PENDING:
                return current
            rv = current.metadata.resource_version
            await asyncio.sleep(REWATCH_DELAY)

    async def _forget(self, created: GPUBindRequest) -> None:
        """Delete the answered request; best effort, the VM's deletion collects it anyway."""
        try:
            await self.client.delete(
                GPUBindRequest, created.metadata.name, created.metadata.namespace
            )
        except NotFound:
            pass
        except Exception as e:
            log.warning(
                "could not delete bind request %s/%s: %s",
                created.metadata.namespace,
                created.metadata.name,
                e,
            )

    async def _devices(self, answered: GPUBindRequest) -> dict[str, GPUDevice]:
        """The answered devices: from the world, else past it (a replica's cache may lag)."""
        out: dict[str, GPUDevice] = {}
        for name in answered.status.devices:
            d = self.world.devices.get(name)
            if d is None or not d.status.class_name:
                try:
                    d = await self.client.get(GPUDevice, name)
                except NotFound:
                    continue
            out[name] = d
        return out

    # --- answering -------------------------------------------------------------------

    def _deny(self, request: AdmissionRequest, message: str) -> dict[str, Any]:
        log.info("VMI %s/%s denied: %s", request.namespace, _vmi_name(request), message)
        return denied(request.uid, message)

    def _failed(self, request: AdmissionRequest, error: Exception) -> dict[str, Any]:
        log.exception("VMI %s/%s: the webhook failed", request.namespace, _vmi_name(request))
        return denied(
            request.uid,
            f"gpu-binder's webhook failed ({type(error).__name__}: {error}); KubeVirt will retry",
        )


def target_of(request: AdmissionRequest) -> Target | str:
    """The order the VMI runs for, or why it cannot be told (as a denial message)."""
    meta = (request.object or {}).get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    vmi_name = meta.get("name")
    if not isinstance(vmi_name, str) or not vmi_name:
        return "a VMI with GPUs needs metadata.name: generateName is not supported"
    if not request.namespace:
        return "a VMI with GPUs needs a namespace"
    owner = vm_owner(meta.get("ownerReferences"))
    if owner is None:
        return Target(request.namespace, vmi_name, "", vmi_name, owned=False)
    name, uid = owner
    return Target(request.namespace, name, uid, vmi_name, owned=True)


def vm_owner(refs: object) -> tuple[str, str] | None:
    """(name, uid) of the VirtualMachine owner: the controller one, else the first."""
    if not isinstance(refs, list):
        return None
    owners = [
        r
        for r in refs
        if isinstance(r, dict) and r.get("kind") == VM_KIND and isinstance(r.get("name"), str)
    ]
    if not owners:
        return None
    best = next((r for r in owners if r.get("controller") is True), owners[0])
    return str(best["name"]), str(best.get("uid") or "")


def timeout_message(config: Config) -> str:
    seconds = config.bind_timeout.total_seconds()
    return f"no answer from gpu-binder within {seconds:g}s; KubeVirt will retry"


def _dry_run_warning(wanted: Mapping[str, int], config: Config) -> str:
    order = ", ".join(f"{n} × {c}" for c, n in sorted(wanted.items()))
    return (
        f"dry run: the VM holds no complete GPU set, so the VMI is not pinned; a real create "
        f"asks gpu-binder to bind {order} and waits up to "
        f"{config.bind_timeout.total_seconds():g}s"
    )


def _answered(event: WatchEvent[Any], name: str) -> GPUBindRequest | Literal["deleted"] | None:
    obj = event.object
    if not isinstance(obj, GPUBindRequest) or obj.metadata.name != name:
        return None
    if event.type == "DELETED":
        return "deleted"
    return obj if obj.status.phase != RequestPhase.PENDING else None


async def _close(stream: AsyncIterator[Any]) -> None:
    """Close a watch stream; the protocol's iterators need not have aclose."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


def _vmi_name(request: AdmissionRequest) -> str:
    meta = (request.object or {}).get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""
