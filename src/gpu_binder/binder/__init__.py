"""The binder: what the rest of gpu_binder may use of it.

The reconciler and its keys run the pass (kube, sim, bench, kubectl); the config, the
metrics, the Event recorder and the usage ledger's reading serve those who run one. The
webhook asks the binder's rules with explicit inputs (binder.queries, kubevirtcr), and the
replay places orders through a Placer. Everything else in binder/ — the steps, the pass
Context, the Plan — is the binder's own and may change without notice to the rest.
"""

from gpu_binder.binder.config import Config
from gpu_binder.binder.events import ClientRecorder, Recorder
from gpu_binder.binder.kubevirtcr import served_twice
from gpu_binder.binder.ledger import of_ledger
from gpu_binder.binder.ledgertotals import LedgerTotals
from gpu_binder.binder.metrics import Metrics
from gpu_binder.binder.placer import Placer
from gpu_binder.binder.plan import Note
from gpu_binder.binder.queries import move_reason, reported_degraded
from gpu_binder.binder.reconciler import PASS_KEY, REQUESTS_KEY, NotLeader, Reconciler, Result

__all__ = [
    "PASS_KEY",
    "REQUESTS_KEY",
    "ClientRecorder",
    "Config",
    "LedgerTotals",
    "Metrics",
    "NotLeader",
    "Note",
    "Placer",
    "Reconciler",
    "Recorder",
    "Result",
    "move_reason",
    "of_ledger",
    "reported_degraded",
    "served_twice",
]
