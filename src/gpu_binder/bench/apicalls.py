"""The API server's own account of the requests it served, by verb and resource: how many
(`apiserver_request_total`) and how long they took it (`apiserver_request_duration_seconds`,
admission webhooks and priority-and-fairness queueing included): what one start costs the
API server, with gpu-binder in the path and without. And how long its calls of each
mutating webhook took, as the API server timed them
(`apiserver_admission_webhook_admission_duration_seconds`: connection, TLS, the wait in
the webhook process and its answer), beside which the webhook's own timing of its answer
says how much of a call was spent outside the handler."""

from __future__ import annotations

import asyncio
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from gpu_binder.envtest import ControlPlane

_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+-]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
COUNT = "apiserver_request_total"
SECONDS = "apiserver_request_duration_seconds_sum"
WEBHOOK = "apiserver_admission_webhook_admission_duration_seconds"


@dataclass
class Served:
    """Requests served so far and the seconds they took, keyed "VERB resource[/sub]"."""

    requests: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    # Mutating webhook calls by webhook name: how many, and the seconds they took.
    calls: Counter[str] = field(default_factory=Counter)
    call_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))


async def served(cp: ControlPlane) -> Served:
    resp = await asyncio.to_thread(cp.request, "GET", "/metrics")
    out = Served()
    for line in resp.body.decode().splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        if m["name"] in (f"{WEBHOOK}_count", f"{WEBHOOK}_sum"):
            if m["name"].endswith("_count"):
                out.calls[labels.get("name", "")] += int(float(m["value"]))
            else:
                out.call_seconds[labels.get("name", "")] += float(m["value"])
            continue
        if m["name"] not in (COUNT, SECONDS):
            continue
        if labels.get("verb") in ("WATCH", "CONNECT"):
            continue  # long-running: counted when they end
        key = f"{labels.get('verb', '')} {labels.get('resource', '')}"
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        if m["name"] == COUNT:
            out.requests[key] += int(float(m["value"]))
        else:
            out.seconds[key] += float(m["value"])
    return out


def per_start(before: Served, after: Served, starts: int, top: int = 40) -> dict[str, object]:
    """Between two accounts, per start: the `top` most served requests with the mean time
    each took the API server (ms), and the total. Forty: every verb and resource a start
    touches, so the total is their sum and not a dozen's (which hid a third of it)."""
    requests = after.requests - before.requests
    out: dict[str, object] = {}
    for key, n in requests.most_common(top):
        out[key] = {
            "n": round(n / max(1, starts), 1),
            "ms": round((after.seconds[key] - before.seconds[key]) / n * 1e3, 1),
        }
    out["total"] = round(sum(requests.values()) / max(1, starts), 1)
    return out


def webhook_calls(before: Served, after: Served) -> dict[str, dict[str, float]]:
    """Between two accounts, per mutating webhook: its calls and their mean time, as the
    API server timed them."""
    calls = after.calls - before.calls
    return {
        name: {
            "n": n,
            "mean_ms": round((after.call_seconds[name] - before.call_seconds[name]) / n * 1e3, 1),
        }
        for name, n in sorted(calls.items())
    }


async def quiet(
    cp: ControlPlane, below: int = 20, window: float = 2.0, limit: float = 60.0
) -> None:
    """Until the API server serves fewer than `below` requests in `window` seconds (or
    `limit` seconds passed): a fresh control plane's controllers bootstrap and new nodes
    report for a while, and a burst measured then pays for them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    last = await served(cp)
    while loop.time() < deadline:
        await asyncio.sleep(window)
        now = await served(cp)
        if sum((now.requests - last.requests).values()) < below:
            return
        last = now
