"""Timeline mode: orders hold their GPUs from creation to deletion, and no longer."""

from __future__ import annotations

import pytest

from gpu_binder.replay.baselines import firstfit_policy
from gpu_binder.replay.policy import policy_run
from gpu_binder.replay.timeline import run_timeline

from .make import node, order

HOUR = 3600


def test_an_order_that_left_frees_its_gpus_for_a_later_one() -> None:
    orders = [order(gpus=2, created=0, deleted=HOUR), order(gpus=2, created=HOUR, deleted=2 * HOUR)]
    result = run_timeline([node("n0", gpus=2)], orders, policy_run(firstfit_policy), seed=42)
    assert result.rejected_orders == 0
    assert result.gpu_hours_served == pytest.approx(4.0)


def test_an_order_that_fits_nowhere_on_arrival_is_rejected_and_not_served() -> None:
    orders = [order(gpus=2, created=0, deleted=HOUR), order(gpus=1, created=10, deleted=HOUR)]
    result = run_timeline([node("n0", gpus=2)], orders, policy_run(firstfit_policy), seed=42)
    assert result.rejected_orders == 1
    assert result.gpu_hours_requested == pytest.approx(2.0 + (HOUR - 10) / HOUR)
    assert result.gpu_hours_served == pytest.approx(2.0)


def test_an_order_deleted_as_it_is_created_holds_nothing() -> None:
    orders = [order(gpus=2, created=5, deleted=5), order(gpus=2, created=5, deleted=HOUR)]
    result = run_timeline([node("n0", gpus=2)], orders, policy_run(firstfit_policy), seed=42)
    assert result.rejected_orders == 0


def test_unallocated_share_is_averaged_over_the_trace_span() -> None:
    # Two of four GPUs for the first half of the span, none for the second.
    orders = [
        order(gpus=2, created=0, deleted=HOUR),
        order(gpus=1, created=2 * HOUR, deleted=2 * HOUR),
    ]
    result = run_timeline([node("n0", gpus=4)], orders, policy_run(firstfit_policy), seed=42)
    assert result.unallocated_gpu_pct == pytest.approx(75.0)
