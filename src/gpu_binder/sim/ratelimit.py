"""The retry timing of a controller's workqueue, per item, in virtual time.

KubeVirt's controllers queue keys with client-go's default controller rate limiter
(`workqueue.DefaultTypedControllerRateLimiter`; kubevirt/kubevirt
`pkg/virt-controller/watch/vm/vm.go`, `NewController`): a failed sync is retried after
5 ms, doubling with each consecutive failure up to 1000 s
(`ItemExponentialFailureRateLimiter`), and a success forgets the failures. An event about
the object queues it at once whatever the backoff, as an informer's handler does; only
the retries wait. The limiter's overall bucket (10 per second, bursts of 100) is left
out: the sim's events come one at a time.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

BASE_SECONDS = 0.005
MAX_SECONDS = 1000.0


class ItemBackoff:
    def __init__(self, base: float = BASE_SECONDS, cap: float = MAX_SECONDS) -> None:
        self.base = base
        self.cap = cap
        self._failures: Counter[str] = Counter()
        self._at: dict[str, datetime] = {}

    def failures(self, key: str) -> int:
        return self._failures[key]

    def failed(self, key: str, now: datetime) -> datetime:
        """AddRateLimited: retry after the item's next backoff."""
        delay = min(self.base * 2 ** self._failures[key], self.cap)
        self._failures[key] += 1
        return self.wake(key, now + timedelta(seconds=delay))

    def wake(self, key: str, at: datetime) -> datetime:
        """AddAfter: queue the key at `at` (the earlier of two wakes wins)."""
        found = self._at.get(key)
        if found is None or at < found:
            self._at[key] = at
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
        out = {k for k, t in self._at.items() if t <= now}
        for k in out:
            del self._at[k]
        return out

    def next_wake(self) -> datetime | None:
        return min(self._at.values(), default=None)
