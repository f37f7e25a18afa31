"""On the shipped production trace, the binder's own placement beats every baseline, close
to the model-capacity bound (the figures of issue 5, on one seed to stay quick)."""

from __future__ import annotations

import pytest

from gpu_binder.replay.order import orders_from_pods
from gpu_binder.replay.registry import BINDER, policies
from gpu_binder.replay.report import replay
from gpu_binder.replay.trace import load_nodes, load_pods

from .make import SHIPPED


@pytest.mark.parametrize("variant", ["default", "gpuspec33"])
def test_the_binder_beats_every_baseline_close_to_the_bound(variant: str) -> None:
    nodes = load_nodes(SHIPPED / "openb_node_list_gpu_node.csv")
    orders = orders_from_pods(load_pods(SHIPPED / f"openb_pod_list_{variant}.csv"))

    result = replay(variant, nodes, orders, policies(), seeds=1)
    figures = result["policies"]
    assert isinstance(figures, dict)
    unallocated = {name: row["unallocated_gpu_pct"] for name, row in figures.items()}
    best_baseline = min(v for name, v in unallocated.items() if name != BINDER)
    assert unallocated[BINDER] <= best_baseline
    bound = result["bound_unallocated_gpu_pct"]
    assert isinstance(bound, float)
    assert unallocated[BINDER] <= bound + 0.3
