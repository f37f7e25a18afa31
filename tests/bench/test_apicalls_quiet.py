"""bench start waits for a quiet API server before its first burst (bench.apicalls.quiet)."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import pytest

from gpu_binder.bench import apicalls
from gpu_binder.envtest import ControlPlane


def counting(per_window: list[int]) -> tuple[Any, list[int]]:
    """A `served` whose total grows by per_window[i] at its i-th call after the first."""
    calls: list[int] = []
    total = Counter[str]()

    async def served(cp: ControlPlane) -> apicalls.Served:
        if calls:
            total["PUT leases"] += per_window[min(len(calls) - 1, len(per_window) - 1)]
        calls.append(sum(total.values()))
        return apicalls.Served(requests=Counter(total))

    return served, calls


async def test_quiet_waits_while_the_server_is_busy_and_returns_once_it_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served, calls = counting([300, 250, 5])
    monkeypatch.setattr(apicalls, "served", served)
    await apicalls.quiet(cast(ControlPlane, None), below=20, window=0.001)
    assert len(calls) == 4  # the first look, two busy windows, then a quiet one


async def test_quiet_gives_up_after_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    served, calls = counting([1000])
    monkeypatch.setattr(apicalls, "served", served)
    await apicalls.quiet(cast(ControlPlane, None), below=20, window=0.001, limit=0.01)
    assert 2 <= len(calls) < 100
