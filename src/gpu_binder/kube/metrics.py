"""Metrics of running against an API server, on the binder's own registry (binder.metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class RunMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.leader = Gauge(
            "gpu_binder_leader",
            "1 while this replica holds the lease and reconciles",
            registry=registry,
        )
        self.admissions = Histogram(
            "gpu_binder_webhook_duration_seconds",
            "Time to answer an AdmissionReview, by webhook (vmi, pod)",
            ["webhook", "allowed"],
            registry=registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.bad_reviews = Counter(
            "gpu_binder_webhook_bad_reviews",
            "Malformed AdmissionReviews answered 400",
            registry=registry,
        )
        self.relists = Counter(
            "gpu_binder_informer_relists",
            "Lists after a watch expired (410 Gone)",
            ["kind"],
            registry=registry,
        )
        self.refused = Counter(
            "gpu_binder_webhook_refused",
            "Connections and requests the webhook server refused, by reason (connections: "
            "past the cap; client: a certificate not the API server's; body_timeout, "
            "body_size; agent_read: a node agent's read of other nodes' GPUDevices)",
            ["reason"],
            registry=registry,
        )
        self.loop_lag = Histogram(
            "gpu_binder_event_loop_lag_duration_seconds",
            "How late the event loop woke a task due now (sampled every 0.1 s, kube.looplag): "
            "the wait of a webhook review or a watch event behind the work in progress",
            registry=registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.cert_reloads = Counter(
            "gpu_binder_webhook_cert_reloads", "Serving certificate reloads", registry=registry
        )
