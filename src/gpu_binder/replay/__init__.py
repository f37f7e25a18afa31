"""Replaying a production GPU trace to measure placement policies side by side.

`gpu-binder replay` (see `command`) loads a trace (`trace`), turns its GPU pods into
orders (`order`), and places them on a light cluster model (`cluster`) with each policy
(`policy`, `baselines`, `registry`), either arriving until the cluster is overfull
(`arrival`) or at their own times (`timeline`), beside the model-capacity bound
(`bound`); `report` sums the runs up as JSON.
"""

from gpu_binder.replay.cluster import NodeGroup, ReplayCluster
from gpu_binder.replay.order import Order, orders_from_pods
from gpu_binder.replay.policy import Policy, PolicyFactory, Score, lowest_score

__all__ = [
    "NodeGroup",
    "Order",
    "Policy",
    "PolicyFactory",
    "ReplayCluster",
    "Score",
    "lowest_score",
    "orders_from_pods",
]
