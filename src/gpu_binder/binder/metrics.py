"""The binder's metrics, on a registry of its own so several binders can share a process.

Names follow Prometheus's conventions (https://prometheus.io/docs/practices/naming/): base
units in the name (`_seconds`, `_timestamp_seconds`, `_gpus`), `_total` on counters (the
client adds it), and `gpu_binder_build_info` for the version; tests/kube/test_metric_names.py
lints the exposition with promtool. The chart's alerts (templates/prometheusrule.yaml) and
dashboard read these names.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_binder.api.types import Phase
from gpu_binder.binder import quota
from gpu_binder.binder.ledgertotals import LedgerTotals
from gpu_binder.cache.world import World


class TenantGPUs(Collector):
    """GPUs each tenant holds, read from the world's index when scraped: a tenant that
    holds nothing any more has no series left behind, and a pass sets nothing."""

    def __init__(self) -> None:
        self.held: Mapping[tuple[str, str, str], int] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpu_binder_tenant_gpus",
            "GPUs held per namespace and class: bound (reserved) or attached (in use by a VMI)",
            labels=["namespace", "class_name", "state"],
        )
        for (namespace, class_name, state), n in sorted(self.held.items()):
            family.add_metric([namespace, class_name or "-", state], n)
        yield family


class QuotaGPUs(Collector):
    """Per namespace and class a quota limits: the GPUs it holds (bound and attached,
    as the quota counts them) and its hard limit, read from the world when scraped."""

    def __init__(self) -> None:
        self.world: World | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpu_binder_quota_gpus",
            "GPUs of a class a namespace holds (kind=used: bound or attached) and its "
            "ResourceQuota allows (kind=hard), where a quota limits the class's resourceName",
            labels=["namespace", "class_name", "kind"],
        )
        world = self.world
        if world is not None:
            for ns in sorted(world.quotas_by_namespace):
                for class_name, limit in sorted(quota.of_namespace(world, ns).limits.items()):
                    family.add_metric([ns, class_name, "used"], quota.held(world, ns, class_name))
                    family.add_metric([ns, class_name, "hard"], limit.hard)
        yield family


class GPUSeconds(Collector):
    """gpu_binder_gpu_seconds_total{namespace, class_name, kind}: GPU-seconds of the
    ledger, attached and reserved, read when scraped (binder.ledgertotals); nothing
    until the ledger's closed records were read."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.world: World | None = None
        self.totals: LedgerTotals | None = None
        self.clock = clock or (lambda: datetime.now(UTC))

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "gpu_binder_gpu_seconds",
            "GPU-seconds of the ledger per namespace, class and kind (attached: in use by a "
            "VMI; reserved: bound to a VM with no VMI on it): closed records, and open ones "
            "so far; the same on every replica and across restarts",
            labels=["namespace", "class_name", "kind"],
        )
        world, totals = self.world, self.totals
        if world is not None and totals is not None and totals.loaded:
            for (ns, class_name, kind), v in sorted(totals.values(world, self.clock()).items()):
                family.add_metric([ns, class_name or "-", kind], v)
        yield family


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.devices = Gauge(
            "gpu_binder_devices",
            "GPUDevices by class and phase",
            ["class_name", "phase"],
            registry=r,
        )
        self.largest_free = Gauge(
            "gpu_binder_largest_free_set_gpus",
            "Largest order (in GPUs) that can be bound now",
            ["class_name"],
            registry=r,
        )
        self.passes = Counter("gpu_binder_passes", "Passes run", ["key", "outcome"], registry=r)
        self.pass_seconds = Histogram(
            "gpu_binder_pass_duration_seconds",
            "Duration of a pass",
            ["key"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 1, 5),
        )
        self.writes = Counter("gpu_binder_writes", "Writes made", ["verb"], registry=r)
        self.conflicts = Counter("gpu_binder_conflicts", "Writes refused with 409", registry=r)
        # DESIGN §3 attachments: an unmanaged VMI whose node has no free devices to adopt
        # is said in an Event and counted here; one still within attachmentGrace is not.
        self.unmanaged = Gauge(
            "gpu_binder_unmanaged_attachments",
            "Live VMIs running with GPUs not bound to them that could not be adopted after "
            "attachmentGrace (their node has too few free devices of their class)",
            registry=r,
        )
        self.unplaceable = Gauge(
            "gpu_binder_unplaceable_orders",
            "Orders of existing VMs (or standalone VMIs) that no node can take now",
            registry=r,
        )
        # DESIGN §3 node status: nodes whose device plugin has served too few units for
        # longer than degradedGrace (Node condition GPUDegraded=True).
        self.degraded_nodes = Gauge(
            "gpu_binder_degraded_nodes",
            "Nodes whose device plugin serves fewer GPUs than they hold, past degradedGrace",
            registry=r,
        )
        # A reset that never comes keeps a GPU from every tenant: the alert compares this
        # with time(), so it fires for one stuck device, not for a busy cluster's turnover.
        self.oldest_cleaning = Gauge(
            "gpu_binder_oldest_cleaning_timestamp_seconds",
            "When the GPU longest in Cleaning was released (Unix time), per class; no "
            "series while none of the class is cleaning",
            ["class_name"],
            registry=r,
        )
        self.build = Info("gpu_binder_build", "The running gpu-binder", registry=r)
        self.build.info({"version": version(), "python": platform.python_version()})
        self.tenants = TenantGPUs()
        r.register(self.tenants)
        self.quotas = QuotaGPUs()
        r.register(self.quotas)
        self.gpu_seconds = GPUSeconds()
        r.register(self.gpu_seconds)

    def export(
        self,
        world: World,
        largest: dict[str, int],
        unmanaged: int,
        unplaceable: int,
        degraded_nodes: int = 0,
    ) -> None:
        for class_name, by_phase in world.devices.counts.items():
            for phase in Phase:
                self.devices.labels(class_name or "-", phase.value).set(by_phase.get(phase, 0))
        for class_name, n in largest.items():
            self.largest_free.labels(class_name).set(n)
        self.unmanaged.set(unmanaged)
        self.unplaceable.set(unplaceable)
        self.degraded_nodes.set(degraded_nodes)
        # The cleaning index holds the few devices between release and reset, not all.
        oldest: dict[str, float] = {}
        for name in world.devices.cleaning:
            d = world.devices.by_name[name]
            if d.status.released_at is None:
                continue
            at = d.status.released_at.timestamp()
            class_name = d.status.class_name or "-"
            oldest[class_name] = min(at, oldest.get(class_name, at))
        self.oldest_cleaning.clear()
        for class_name, at in oldest.items():
            self.oldest_cleaning.labels(class_name).set(at)
        self.tenants.held = world.devices.held
        self.quotas.world = world


def version() -> str:
    """The installed package's version (pyproject.toml), or "unknown" from a bare checkout."""
    try:
        return metadata.version("gpu-binder")
    except metadata.PackageNotFoundError:
        return "unknown"
