"""bench start's account of the API server's calls of each mutating webhook, as the API
server timed them (bench.apicalls.webhook_calls)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from gpu_binder.bench import apicalls
from gpu_binder.envtest import ControlPlane

FAMILY = "apiserver_admission_webhook_admission_duration_seconds"


@dataclass
class Metrics:
    body: bytes


class Server:
    """A control plane whose /metrics is `text`."""

    def __init__(self, text: str) -> None:
        self.text = text

    def request(self, method: str, path: str) -> Any:
        return Metrics(self.text.encode())


def exposition(vmi: tuple[int, float], pod: tuple[int, float]) -> str:
    lines = []
    for name, (n, seconds) in (("vmi.gpu-binder.cozystack.io", vmi), ("pod.x", pod)):
        labels = f'name="{name}",operation="CREATE",rejected="false",type="admit"'
        lines += [f"{FAMILY}_count{{{labels}}} {n}", f"{FAMILY}_sum{{{labels}}} {seconds}"]
    return "\n".join(lines) + '\napiserver_request_total{verb="POST",resource="pods"} 7\n'


async def test_webhook_calls_are_the_difference_of_two_accounts_per_webhook() -> None:
    before = await apicalls.served(cast(ControlPlane, Server(exposition((10, 1.0), (5, 0.1)))))
    after = await apicalls.served(cast(ControlPlane, Server(exposition((30, 3.0), (5, 0.1)))))
    assert apicalls.webhook_calls(before, after) == {
        "vmi.gpu-binder.cozystack.io": {"n": 20, "mean_ms": 100.0}
    }
    assert after.requests["POST pods"] == 7  # requests are still counted beside them
