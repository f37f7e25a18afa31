"""The admission webhooks' decisions (DESIGN §4): pin a starting VMI to its VM's GPU set
(decision), and the pods KubeVirt renders for it to the set's node (pods)."""

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
