"""The admission webhook's decision (DESIGN §4): pin a starting VMI to its VM's GPU set."""

from gpu_binder.webhook.decision import Admitter, Decision, NeedsRequest, Respond
from gpu_binder.webhook.review import AdmissionRequest, BadReview, parse_review

__all__ = [
    "AdmissionRequest",
    "Admitter",
    "BadReview",
    "Decision",
    "NeedsRequest",
    "Respond",
    "parse_review",
]
