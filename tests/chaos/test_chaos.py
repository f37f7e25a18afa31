"""The embedded cluster under a random workload with faults: the invariants of DESIGN §2
hold after every event, over many seeds."""

from __future__ import annotations

import pytest

from gpu_binder.binder.config import Config
from gpu_binder.sim.command import run

# The chaos workload runs KubeVirt as its source does (sim.kubevirt: pods scheduled, the
# LiveUpdate affinity sync, instancetypes, every runStrategy, skewed clocks). Before the pod
# pin and issue 10's binder fixes these seeds broke invariants 3, 9 and 11 (the VMI pin
# undone, launcher pods handed other tenants' GPUs); invariants 9, 9b and 11 are each shown
# failing on a history that breaks them in tests/sim/test_invariants_kubevirt.py.


# Seed 5 broke invariant 11 from the ledger merge until record opens were written after
# the pass's closes (binder.plan waves): a GPU released and bound to another VM in one pass
# had the new Reserved record created while the old one was still open.


@pytest.mark.parametrize("seed", range(1, 13))
async def test_invariants_hold_under_chaos(seed: int) -> None:
    figures = await run(nodes=12, gpus_per_node=8, vms=60, events=300, seed=seed, chaos=True)
    assert figures["violations"] == []


@pytest.mark.parametrize("seed", range(1, 9))
async def test_incremental_passes_decide_as_full_sweeps_would(seed: int) -> None:
    # Without defragmentation: it runs on resync sweeps and while an order newly waits, by
    # design (binder.steps.defrag), so a binder sweeping on every pass makes room sooner
    # and later decisions differ. Every other step must decide alike.
    config = Config(defrag=False)
    incremental = await run(
        nodes=10, gpus_per_node=8, vms=50, events=300, seed=seed, chaos=True, config=config
    )
    swept = await run(
        nodes=10,
        gpus_per_node=8,
        vms=50,
        events=300,
        seed=seed,
        chaos=True,
        sweep_always=True,
        config=config,
    )
    assert incremental["final_bindings"] == swept["final_bindings"]
    for figure in ("binds", "moves", "rebinds", "adoptions", "usage_records_closed"):
        assert incremental[figure] == swept[figure], figure


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 4))
async def test_invariants_hold_in_a_long_chaos_run(seed: int) -> None:
    figures = await run(nodes=200, gpus_per_node=8, vms=1500, events=20_000, seed=seed, chaos=True)
    assert figures["violations"] == []
