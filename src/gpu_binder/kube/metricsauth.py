"""Who may read /metrics: a bearer token the API server vouches for (TokenReview) of a
user allowed `get` on the non-resource URL /metrics (SubjectAccessReview).

/metrics carries gpu_binder_tenant_gpus, the GPUs each namespace holds: not for anonymous
callers. This is the check kube-rbac-proxy makes, and controller-runtime's metrics
filter (`filters.WithAuthenticationAndAuthorization`), done in the binder's process:
no sidecar image to ship and keep patched, and the probes stay unauthenticated on the
same port. Prometheus' usual ClusterRole (kube-prometheus-stack's) grants get on /metrics
already; the chart's gpu-binder-metrics-reader ClusterRole grants it to others.

Answers are cached by the token's digest (`ttl` for an allowed token, `denied_ttl` for a
refused one), so a scrape costs the API server two reviews a minute, and a flood of bad
tokens no more than one review pair per token per `denied_ttl`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_binder.client.errors import ApiError

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class Requests(Protocol):
    async def request(self, method: str, url_path: str, body: Any = None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Verdict:
    status: int  # 200, 401 or 403
    reason: str


class TokenAuthorizer:
    def __init__(
        self,
        client: Requests,
        *,
        path: str = "/metrics",
        ttl: float = 60.0,
        denied_ttl: float = 10.0,
        max_entries: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.path = path
        self.ttl = ttl
        self.denied_ttl = denied_ttl
        self.max_entries = max_entries
        self.clock = clock
        self._cache: OrderedDict[bytes, tuple[float, Verdict]] = OrderedDict()
        self.reviews = 0

    async def check(self, authorization: str | None) -> Verdict:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Verdict(401, "a bearer token is required")
        key = hashlib.sha256(token.strip().encode()).digest()
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        verdict = await self._review(token.strip())
        if verdict.status != 503:
            ttl = self.ttl if verdict.status == 200 else self.denied_ttl
            self._cache[key] = (now + ttl, verdict)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return verdict

    async def _review(self, token: str) -> Verdict:
        self.reviews += 1
        try:
            review = await self.client.request(
                "POST",
                TOKEN_REVIEWS,
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                },
            )
            status = review.get("status") or {}
            if not status.get("authenticated"):
                return Verdict(401, "the token is not valid")
            user = status.get("user") or {}
            spec = {
                "user": user.get("username", ""),
                "uid": user.get("uid", ""),
                "groups": user.get("groups") or [],
                "extra": user.get("extra") or {},
                "nonResourceAttributes": {"path": self.path, "verb": "get"},
            }
            access = await self.client.request(
                "POST",
                ACCESS_REVIEWS,
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": spec,
                },
            )
        except ApiError as e:
            # Not cached: the API server's trouble says nothing about the token.
            log.warning("metrics authorization failed: %s", e)
            return Verdict(503, "the API server could not review the token")
        if (access.get("status") or {}).get("allowed"):
            return Verdict(200, "")
        return Verdict(403, f"{spec['user']} may not get {self.path}")
