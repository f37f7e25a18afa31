"""The retry timing of a controller's workqueue, per item, in virtual time.

KubeVirt's controllers queue keys with client-go's default controller rate limiter
(`workqueue.DefaultTypedControllerRateLimiter`; kubevirt/kubevirt
`pkg/virt-controller/watch/vm/vm.go`, `NewController`), the later of two
(`MaxOfRateLimiter`): per item, a failed sync is retried after 5 ms, doubling with each
consecutive failure up to 1000 s (`ItemExponentialFailureRateLimiter`), and a success
forgets the failures; over all items, retries share a token bucket of 10 per second with
bursts of 100 (`BucketRateLimiter`, golang.org/x/time/rate `Reserve`: a retry beyond the
tokens waits its turn). An event about the object queues it at once whatever the
backoff, as an informer's handler does; only the retries wait.

The bucket is client-go's too where a client limits its requests
(`flowcontrol.NewTokenBucketRateLimiter`, the same golang.org/x/time/rate limiter):
`TokenBucket` serves both, in whatever seconds its caller counts.
"""

from __future__ import annotations

import heapq
from collections import Counter
from datetime import datetime, timedelta

BASE_SECONDS = 0.005
MAX_SECONDS = 1000.0
BUCKET_RATE = 10.0
BUCKET_BURST = 100


class TokenBucket:
    """golang.org/x/time/rate's limiter as `Reserve` uses it: `burst` tokens, refilled at
    `rate` a second; a taker beyond them waits its turn. `rate` 0: no limit."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._filled: float | None = None

    def reserve(self, now: float) -> float:
        """Take a token at `now` (seconds): the seconds until it is there."""
        if self.rate <= 0:
            return 0.0
        if self._filled is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._filled) * self.rate)
        self._filled = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class ItemBackoff:
    def __init__(
        self,
        base: float = BASE_SECONDS,
        cap: float = MAX_SECONDS,
        rate: float = BUCKET_RATE,
        burst: int = BUCKET_BURST,
    ) -> None:
        self.base = base
        self.cap = cap
        self.rate = rate
        self.burst = burst
        self._failures: Counter[str] = Counter()
        self._at: dict[str, datetime] = {}
        # The wake times in order; an entry whose time is no longer the key's is stale.
        self._heap: list[tuple[datetime, str]] = []
        self._bucket = TokenBucket(rate, burst)
        # The bucket counts seconds from the first retry: small, so exact to the microsecond.
        self._origin: datetime | None = None

    def failures(self, key: str) -> int:
        return self._failures[key]

    def failed(self, key: str, now: datetime) -> datetime:
        """AddRateLimited: retry after the item's next backoff, or the bucket's turn."""
        delay = min(self.base * 2 ** self._failures[key], self.cap)
        self._failures[key] += 1
        return self.wake(key, now + timedelta(seconds=max(delay, self._reserve(now))))

    def _reserve(self, now: datetime) -> float:
        if self._origin is None:
            self._origin = now
        return self._bucket.reserve((now - self._origin).total_seconds())

    def wake(self, key: str, at: datetime) -> datetime:
        """AddAfter: queue the key at `at` (the earlier of two wakes wins)."""
        found = self._at.get(key)
        if found is None or at < found:
            self._at[key] = at
            heapq.heappush(self._heap, (at, key))
        return self._at[key]

    def forget(self, key: str) -> None:
        """Forget: the sync succeeded; the next failure starts from the base again."""
        self._failures.pop(key, None)

    def drop(self, key: str) -> None:
        """The object is gone: nothing of it is kept."""
        self._failures.pop(key, None)
        self._at.pop(key, None)

    def due(self, now: datetime) -> set[str]:
        """The keys whose wake time has come; their timers are spent."""
        out = set()
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, key = heapq.heappop(heap)
            if self._at.get(key) == at:
                del self._at[key]
                out.add(key)
        return out

    def next_wake(self) -> datetime | None:
        return min(self._at.values(), default=None)
