"""Replaying a production GPU trace to measure placement policies side by side.

`gpu-binder replay` (see `command`) loads a trace (`trace`), turns its GPU pods into
orders (`order`), and runs each contender (`registry`) on the trace's cluster: the
binder itself on a World built from the node list (`binder_adapter`), and the classic
policies on a light cluster model (`cluster`, `policy`, `baselines`). Orders arrive until
the cluster is overfull (`arrival`) or at their own times (`timeline`), beside the
model-capacity bound (`bound`); `report` sums the runs up as JSON and `plot` draws them.
"""

from gpu_binder.replay.cluster import NodeGroup, ReplayCluster
from gpu_binder.replay.order import Order, orders_from_pods
from gpu_binder.replay.policy import (
    Policy,
    PolicyFactory,
    Run,
    RunFactory,
    Score,
    lowest_score,
    policy_run,
)

__all__ = [
    "NodeGroup",
    "Order",
    "Policy",
    "PolicyFactory",
    "ReplayCluster",
    "Run",
    "RunFactory",
    "Score",
    "lowest_score",
    "orders_from_pods",
    "policy_run",
]
