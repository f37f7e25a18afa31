"""bench start's account of what a burst cost each process in CPU time (bench.cpu)."""

from __future__ import annotations

import os
import time

from gpu_binder.bench import cpu


def test_a_process_that_computes_is_charged_for_it() -> None:
    before = cpu.account({"me": os.getpid()})
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = cpu.account({"me": os.getpid()})
    assert 0.15 <= after["me"] - before["me"] <= 1.0


def test_a_process_that_is_gone_or_not_started_is_left_out() -> None:
    assert cpu.account({"gone": 2**22 + 12345, "not started": None}) == {}


def test_per_start_is_each_process_s_milliseconds_and_their_total() -> None:
    before = {"kube-apiserver": 10.0, "etcd": 2.0}
    after = {"kube-apiserver": 12.0, "etcd": 2.5, "gpu-binder": 1.0}
    assert cpu.per_start(before, after, 100) == {"etcd": 5.0, "kube-apiserver": 20.0, "total": 25.0}
