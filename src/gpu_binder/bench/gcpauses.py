"""The binder process's own account of its garbage collector's pauses
(`gpu_binder_gc_pause_duration_seconds`, kube.collector), read from its /metrics: how often
and how long the event loop, the webhook's answers with it, stopped for a collection
during a burst."""

from __future__ import annotations

from collections import defaultdict

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

FAMILY = "gpu_binder_gc_pause_duration_seconds"
# The histogram's buckets the figures name: pauses longer than these.
LONG = ("0.1", "0.25", "0.5")

Pauses = dict[str, dict[str, float]]


async def scrape(url: str) -> Pauses:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        resp.raise_for_status()
        return parse(await resp.text())


def parse(text: str) -> Pauses:
    """By generation: count, sum and the count at or below each bucket bound."""
    out: defaultdict[str, dict[str, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        if family.name != FAMILY:
            continue
        for s in family.samples:
            generation = s.labels.get("generation", "")
            if s.name.endswith("_count"):
                out[generation]["count"] = s.value
            elif s.name.endswith("_sum"):
                out[generation]["sum"] = s.value
            elif s.name.endswith("_bucket"):
                out[generation][s.labels["le"]] = s.value
    return dict(out)


def since(before: Pauses, after: Pauses) -> dict[str, object]:
    """Between two scrapes, per generation: collections, seconds stopped in all, and how
    many stopped longer than each of LONG."""
    figures: dict[str, object] = {}
    for generation, now in sorted(after.items()):
        then = before.get(generation, {})

        def delta(key: str, now: dict[str, float] = now, then: dict[str, float] = then) -> float:
            return now.get(key, 0.0) - then.get(key, 0.0)

        n = delta("count")
        figures[generation] = {
            "collections": int(n),
            "seconds": round(delta("sum"), 3),
            **{f"over_{bound}_s": int(n - delta(bound)) for bound in LONG},
        }
    return figures
