"""The bind request the webhook sends when a VM's set is incomplete (DESIGN §4): built for
its order, created under a name drawn like generateName's, watched until the binder
answers or the request is deleted, and deleted once answered.

The webhook creates requests and reads devices; it never writes a device (DESIGN §2,
invariant 5).
"""

from __future__ import annotations

import asyncio
import logging
import random
import string
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any, Literal

from gpu_binder.api.kubevirt import KUBEVIRT_API_VERSION
from gpu_binder.api.meta import ObjectMeta, OwnerReference
from gpu_binder.api.types import (
    ClassCount,
    GPUBindRequest,
    GPUBindRequestSpec,
    NameRef,
    RequestPhase,
    VMRef,
)
from gpu_binder.client.errors import AlreadyExists, Gone, NotFound
from gpu_binder.client.interface import Client, WatchEvent
from gpu_binder.webhook.target import VM_KIND, Target

log = logging.getLogger(__name__)

# How long to wait before watching again after a watch stream ended early.
REWATCH_DELAY = 0.05
_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
_NAME_MAX = 253


def bind_request(
    target: Target,
    wanted: Mapping[str, int],
    name: str,
    alternatives: tuple[str, ...] = (),
) -> GPUBindRequest:
    """The request for wanted (class: count) GPUs of target's order, garbage-collected
    with its VM."""
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
        metadata=ObjectMeta(name=name, namespace=target.namespace, owner_references=owners),
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


def request_name(vmi_name: str, rng: random.Random) -> str:
    """`<vmi name>-<5 random>`, as generateName would, which the in-memory API lacks."""
    suffix = "".join(rng.choices(_SUFFIX_ALPHABET, k=5))
    base = vmi_name[: _NAME_MAX - len(suffix) - 1].rstrip("-.")
    return f"{base}-{suffix}"


# What an in-memory request's name begins with (World.asked): a ":" no object name may
# hold, so it never shares a key with a GPUBindRequest of the API.
IN_MEMORY = "in-memory:"


def in_memory(request: GPUBindRequest, now: datetime) -> GPUBindRequest:
    """The request as handed to this process's reconciler in memory, never created: named
    apart from every object, created now (its place in the requests step's line)."""
    meta = request.metadata
    name = IN_MEMORY + meta.name
    stamped = meta.model_copy(update={"name": name, "creation_timestamp": now})
    return request.model_copy(update={"metadata": stamped})


async def create(client: Client, request: GPUBindRequest, rng: random.Random) -> GPUBindRequest:
    """Create the request, drawing a new name suffix if the random one was taken."""
    for _ in range(3):
        try:
            return await client.create(request)
        except AlreadyExists:
            meta = request.metadata.model_copy(
                update={"name": request_name(request.spec.vmi.name, rng)}
            )
            request = request.model_copy(update={"metadata": meta})
    return await client.create(request)


async def wait_for_answer(
    client: Client, created: GPUBindRequest
) -> GPUBindRequest | Literal["deleted"]:
    """Watch the request from its creation until the binder answers it or it is deleted."""
    meta = created.metadata
    rv = meta.resource_version
    while True:
        stream = client.watch(GPUBindRequest, meta.namespace, resource_version=rv)
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
            current = await client.get(GPUBindRequest, meta.name, meta.namespace)
        except NotFound:
            return "deleted"
        if current.status.phase != RequestPhase.PENDING:
            return current
        rv = current.metadata.resource_version
        await asyncio.sleep(REWATCH_DELAY)


async def forget(client: Client, created: GPUBindRequest) -> None:
    """Delete the answered request; best effort, the VM's deletion collects it anyway."""
    try:
        await client.delete(GPUBindRequest, created.metadata.name, created.metadata.namespace)
    except NotFound:
        pass
    except Exception as e:
        log.warning(
            "could not delete bind request %s/%s: %s",
            created.metadata.namespace,
            created.metadata.name,
            e,
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
