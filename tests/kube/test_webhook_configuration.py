"""The webhook configuration the dev cluster, the benchmarks and the node tier register:
deploy/binder/webhook.yaml pointed at a server outside the cluster."""

from __future__ import annotations

import pytest

from gpu_binder.devcluster import fleet


def test_each_webhook_calls_its_own_path_under_the_servers_address() -> None:
    config = fleet.webhook_configuration("https://127.0.0.1:9443", b"ca")
    urls = {h["name"]: h["clientConfig"]["url"] for h in config["webhooks"]}
    assert urls == {
        "vmi.gpu-binder.cozystack.io": "https://127.0.0.1:9443/mutate",
        "pod.gpu-binder.cozystack.io": "https://127.0.0.1:9443/mutate-pods",
    }


def test_a_base_address_with_a_path_is_refused_as_it_would_call_no_webhook() -> None:
    # https://host:port/mutate would make /mutate/mutate, a 404 for every GPU VMI.
    with pytest.raises(ValueError, match="has a path"):
        fleet.webhook_configuration("https://127.0.0.1:9443/mutate", b"ca")
