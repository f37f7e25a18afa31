"""The /metrics authorizer: a bearer token reviewed by the API server, the answer cached
so scrapes and floods of bad tokens cost the API server little."""

from __future__ import annotations

from typing import Any

from gpu_binder.client.errors import ApiError
from gpu_binder.kube.metricsauth import ACCESS_REVIEWS, TOKEN_REVIEWS, TokenAuthorizer


class FakeAPI:
    """Tokens "good" (allowed), "nosy" (authenticated, not allowed); others unknown."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.down = False

    async def request(self, method: str, url_path: str, body: Any = None) -> dict[str, Any]:
        self.calls.append(url_path)
        if self.down:
            raise ApiError("connection refused")
        if url_path == TOKEN_REVIEWS:
            token = body["spec"]["token"]
            if token not in ("good", "nosy"):
                return {"status": {"authenticated": False}}
            return {"status": {"authenticated": True, "user": {"username": token}}}
        assert url_path == ACCESS_REVIEWS
        assert body["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return {"status": {"allowed": body["spec"]["user"] == "good"}}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_no_token_is_401_without_asking_the_api_server() -> None:
    api = FakeAPI()
    verdict = await TokenAuthorizer(api).check(None)
    assert verdict.status == 401 and api.calls == []


async def test_an_allowed_token_is_reviewed_once_per_ttl() -> None:
    api, clock = FakeAPI(), Clock()
    auth = TokenAuthorizer(api, ttl=60, clock=clock)
    assert (await auth.check("Bearer good")).status == 200
    assert (await auth.check("Bearer good")).status == 200
    assert len(api.calls) == 2  # one TokenReview, one SubjectAccessReview
    clock.t = 61
    assert (await auth.check("Bearer good")).status == 200
    assert len(api.calls) == 4


async def test_refusals_say_why_and_are_cached_too() -> None:
    api, clock = FakeAPI(), Clock()
    auth = TokenAuthorizer(api, denied_ttl=10, clock=clock)
    assert (await auth.check("Bearer forged")).status == 401
    nosy = await auth.check("Bearer nosy")
    assert nosy.status == 403 and "nosy may not get /metrics" in nosy.reason
    calls = len(api.calls)
    for _ in range(100):
        await auth.check("Bearer forged")
    assert len(api.calls) == calls


async def test_an_api_server_failure_is_503_and_not_cached() -> None:
    api = FakeAPI()
    auth = TokenAuthorizer(api)
    api.down = True
    assert (await auth.check("Bearer good")).status == 503
    api.down = False
    assert (await auth.check("Bearer good")).status == 200


async def test_the_cache_is_bounded() -> None:
    auth = TokenAuthorizer(FakeAPI(), max_entries=8)
    for i in range(100):
        await auth.check(f"Bearer t{i}")
    assert len(auth._cache) == 8
