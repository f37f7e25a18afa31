"""The API server calling the webhooks on the embedded cluster: the AdmissionReview sent, a
bind request the webhook needs answered by the binder in between, the patch applied; for
VMIs gpu-binder's VMI webhook, for pods its pod webhook where it exists.

The webhook's two halves without I/O (`Admitter.decide` and `answer`) are joined here in
virtual time: the bind request is created, the caller's binder answers it at once, and the
request is deleted, as the webhook does once answered.
"""

from __future__ import annotations

import base64
import importlib
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


# --- pods -------------------------------------------------------------------------------

# The module and class of the pod webhook (branch kv-podpin): `PodPinner(world, config,
# clock)`, whose `decide(review)` answers an AdmissionReview of a Pod CREATE without I/O.
POD_WEBHOOK_MODULE = "gpu_binder.webhook.pods"


def pod_pinner(world: Any, config: Any, clock: Any) -> Any | None:
    """The pod webhook for this world, or None where it does not exist yet (then pods are
    admitted as rendered, as on a cluster without it)."""
    try:
        module = importlib.import_module(POD_WEBHOOK_MODULE)
    except ImportError:
        return None
    return module.PodPinner(world, config, clock)


def call_pod_webhook(
    pinner: Any, pod: dict[str, Any], *, uid: str = "sim-pod"
) -> dict[str, Any] | str:
    """The API server calling the pod webhook on a Pod CREATE: the review sent, the pod
    as its response admits it (its JSONPatch applied), or the denial message."""
    review = review_request(pod, uid=uid, group="", version="v1", kind="Pod")
    return outcome(pod, pinner.decide(review))
