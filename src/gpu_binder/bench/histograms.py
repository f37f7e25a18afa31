"""Histograms of the binder process's own /metrics, read before and after the burst: how
often and how long its garbage collector stopped the event loop (the webhook's answers
with it; `gpu_binder_gc_pause_duration_seconds`, kube.collector), and how long its passes
took, by key (`gpu_binder_pass_duration_seconds`: requests passes bind what the webhook
waits on, full passes keep the books), and how long its webhooks held each admission, by
webhook (`gpu_binder_webhook_duration_seconds`: from the review read to its answer; the
API server's own time and the wait for the event loop before it are not in it)."""

from __future__ import annotations

from collections import defaultdict

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

GC_PAUSES = ("gpu_binder_gc_pause_duration_seconds", "generation", (0.1, 0.25, 0.5))
PASSES = ("gpu_binder_pass_duration_seconds", "key", (0.25, 1.0, 5.0))
WEBHOOKS = ("gpu_binder_webhook_duration_seconds", "webhook", (0.05, 0.25, 1.0))
LOOP_LAG = ("gpu_binder_event_loop_lag_duration_seconds", "", (0.05, 0.25, 1.0))

# By label value: count, sum and the count at or below each bucket bound (keyed by the
# bound as str(float), whatever the exposition's spelling), summed over other labels.
Histogram = dict[str, dict[str, float]]


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        resp.raise_for_status()
        return await resp.text()


def parse(text: str, family: str, label: str) -> Histogram:
    out: defaultdict[str, dict[str, float]] = defaultdict(dict)
    for f in text_string_to_metric_families(text):
        if f.name != family:
            continue
        for s in f.samples:
            row = out[s.labels.get(label, "")]
            if s.name.endswith("_count"):
                key = "count"
            elif s.name.endswith("_sum"):
                key = "sum"
            elif s.name.endswith("_bucket"):
                key = str(float(s.labels["le"]))
            else:
                continue
            row[key] = row.get(key, 0.0) + s.value
    return dict(out)


def gauge(text: str, family: str) -> float | None:
    """A gauge's value in a /metrics text (its first sample; None when not exposed)."""
    for f in text_string_to_metric_families(text):
        if f.name == family and f.samples:
            return float(f.samples[0].value)
    return None


def since(before: Histogram, after: Histogram, long: tuple[float, ...]) -> dict[str, object]:
    """Between two scrapes, per label value: observations, their seconds in all, and how
    many were longer than each bound of `long`."""
    figures: dict[str, object] = {}
    for value, now in sorted(after.items()):
        then = before.get(value, {})

        def delta(key: str, now: dict[str, float] = now, then: dict[str, float] = then) -> float:
            return now.get(key, 0.0) - then.get(key, 0.0)

        n = delta("count")
        figures[value] = {
            "n": int(n),
            "seconds": round(delta("sum"), 3),
            **{f"over_{bound}_s": int(n - delta(str(bound))) for bound in long},
        }
    return figures


def both(before: str, after: str) -> dict[str, object]:
    """The collector's pauses, the passes and the webhooks' answers between two scrapes."""
    families = (
        ("gc_pauses", GC_PAUSES),
        ("passes", PASSES),
        ("webhooks", WEBHOOKS),
        ("loop_lag", LOOP_LAG),
    )
    return {
        name: since(parse(before, family, label), parse(after, family, label), long)
        for name, (family, label, long) in families
    }
