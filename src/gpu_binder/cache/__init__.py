"""The binder's cache: the world it decides from, fed by watch events, and its indexes.

`World` holds every watched object and the indexes derived from them (devices by node
and phase, free sets, node resources, the orders); `watched` says which objects those are
and holds the one loop that feeds a World their events (`feed`; `listed` and `fill` for
a fresh one). The package imports nothing of `binder/` or `webhook/`, which both read it.
"""

from gpu_binder.cache.watched import SELECTORS, WATCHED, feed, fill, listed, namespace_of
from gpu_binder.cache.world import World

__all__ = ["SELECTORS", "WATCHED", "World", "feed", "fill", "listed", "namespace_of"]
