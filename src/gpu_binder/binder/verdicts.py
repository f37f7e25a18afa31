"""A step's memory, between passes, of the keys it found nothing to do for.

A sweep over an unchanged world must cost what changed, not what exists. So besides the
verdicts the memory keeps the keys a step was given and did not find clean: a sweep
takes those (and the changed keys) instead of subtracting every clean key from every key.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable


class Verdicts(dict[str, object]):
    """Per key, what it looked like when a step last found nothing to do for it.

    A dict, so the lookups a sweep makes per key stay C calls; writes go through
    `__setitem__` and `forget`, which keep the keys due beside it."""

    __slots__ = ("unclean",)

    def __init__(self) -> None:
        super().__init__()
        # Keys a step was given and did not find clean: a sweep decides about them again.
        self.unclean: set[str] = set()

    def __setitem__(self, key: str, verdict: object) -> None:
        """Nothing to do for key while it looks like this."""
        super().__setitem__(key, verdict)
        self.unclean.discard(key)

    def forget(self, key: str) -> None:
        """Key is judged anew, or waits for a clock: the next sweep looks at it again."""
        self.pop(key, None)
        self.unclean.add(key)

    def looked_at(self, keys: Iterable[str]) -> None:
        """Keys given to a step stay due until it finds them clean, whatever path it took."""
        self.unclean.update(k for k in keys if k not in self)

    def due(self, every: Collection[str]) -> list[str]:
        """The keys of `every` a sweep trusting these verdicts must decide about, in order."""
        return sorted(self.pending(every))

    def pending(self, every: Collection[str]) -> set[str]:
        """The same, unordered, for a caller that adds keys and orders them once."""
        gone = [k for k in self.unclean if k not in every]
        self.unclean.difference_update(gone)
        self.drop_gone(every)
        return set(self.unclean)

    def drop_gone(self, every: Collection[str]) -> None:
        """Verdicts of keys that are gone are dropped once they could outnumber live ones,
        so a binder that runs for months remembers at most twice what exists; checked in
        O(1), paid once per doubling."""
        if len(self) > 2 * len(every) + 64:
            self._keep_only(every)

    def _keep_only(self, every: Collection[str]) -> None:
        for key in [k for k in self if k not in every]:
            del self[key]

    def restart(self, every: Collection[str]) -> None:
        """Before an exhaustive sweep: every key not found clean is due, and the verdicts
        of keys that are gone go once they could outnumber live ones."""
        if len(self) > len(every):
            self._keep_only(every)
        # A set difference runs in C: an exhaustive sweep costs its keys, not Python loops.
        self.unclean = set(every) - self.keys()
