"""The API server calling the webhook on the embedded cluster: the AdmissionReview sent, a
bind request the webhook needs answered by the binder in between, the patch applied.

The webhook's two halves without I/O (`Admitter.decide` and `answer`) are joined here in
virtual time: the bind request is created, the caller's binder answers it at once, and the
request is deleted, as the webhook does once answered.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gpu_binder.api.types import GPUBindRequest
from gpu_binder.sim.jsonpatch import apply_patch
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook.decision import Admitter, NeedsRequest
from gpu_binder.webhook.review import review_request


@dataclass(frozen=True, slots=True)
class Admission:
    # The VMI as admitted (patched), or why it was denied.
    outcome: dict[str, Any] | str
    # The bind request as the binder answered it, when the webhook had to ask.
    request: GPUBindRequest | None = None


async def call_webhook(
    admitter: Admitter,
    client: MemoryClient,
    vmi: dict[str, Any],
    answer_requests: Callable[[], Awaitable[object]],
    *,
    uid: str = "sim",
) -> Admission:
    """Admit a VMI creation; answer_requests runs the binder's requests pass."""
    review = review_request(vmi, uid=uid)
    decision = admitter.decide(review)
    if not isinstance(decision, NeedsRequest):
        return Admission(outcome(vmi, decision.response))
    created = await client.create(decision.request)
    await answer_requests()
    meta = created.metadata
    answered = client.peek(GPUBindRequest, meta.name, meta.namespace) or created
    response = admitter.answer(review, answered)
    await client.delete(GPUBindRequest, meta.name, meta.namespace)
    return Admission(outcome(vmi, response), answered)


def outcome(vmi: dict[str, Any], response: Mapping[str, Any]) -> dict[str, Any] | str:
    """The VMI as an AdmissionReview response admits it (its patch applied), or the
    message it was denied with."""
    answer = response["response"]
    if not answer["allowed"]:
        return str(answer.get("status", {}).get("message", "denied"))
    if answer.get("patch"):
        return apply_patch(vmi, orjson.loads(base64.b64decode(answer["patch"])))
    return vmi
