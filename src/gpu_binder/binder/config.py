"""The binder's settings (DESIGN §3 "Config"): flags, or their GPU_BINDER_* environment
variables — which a ConfigMap can feed through a container's `envFrom`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class Config:
    # Off: only finalizers, usage records and the release of deleted devices run.
    enabled: bool = True
    # How long an unmanaged VMI may run before its GPUs are adopted; a bind request may
    # still be in flight for it.
    attachment_grace: timedelta = timedelta(seconds=30)
    lost_grace: timedelta = timedelta(minutes=5)
    degraded_grace: timedelta = timedelta(minutes=2)
    bind_timeout: timedelta = timedelta(seconds=5)
    # Bind requests one pass answers (steps.requests); 0: every pending one. A burst's
    # later requests wait for the passes before theirs, past their webhook's timeout, when
    # a pass takes only a few dozen.
    requests_per_pass: int = 100
    # Orders one pass binds (steps.orders), oldest first; 0: every one. A thousand VMs
    # created at once were bound in one pass whose writes held the requests of their
    # starting VMIs past the bind timeout; the rest are bound by the passes right after.
    orders_per_pass: int = 100
    # Bounds how late a grace period is noticed when no event arrives.
    resync: timedelta = timedelta(seconds=30)
    conflict_retry: timedelta = timedelta(milliseconds=100)
    excluded_namespaces: tuple[str, ...] = ("kube-system", "kube-public", "kube-node-lease")
    # Off: a stopped VM's set stays on its devices, even when moving it would let a
    # waiting order in (steps.defrag).
    defrag: bool = True
    kubevirt_namespace: str = "kubevirt"
    # Where every usage record lives (binder.ledger): a namespace no tenant can write or
    # delete in, apart from the binder's own, which an uninstall may delete.
    ledger_namespace: str = "gpu-binder-ledger"
    kubevirt_name: str = "kubevirt"
