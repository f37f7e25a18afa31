"""Rounds of VM bursts and deletions on the real scheduler and controller-manager (`gpu-binder
bench soak`, in small): every round leaves no GPU bound, no record open and no GPU of a
start without its records, and every launcher pod lands on its set's node."""

from __future__ import annotations

from gpu_binder.bench import soak
from gpu_binder.envtest import ControlPlane, NodeAssets


def test_rounds_of_bursts_and_deletions_leave_no_gpu_bound_and_no_record_open(
    node_plane: tuple[ControlPlane, NodeAssets],
) -> None:
    figures = soak.main(nodes=4, gpus=8, vms=8, per_vm=2, rounds=2, progress=lambda _: None)
    for r in figures["rounds"]:
        assert r["not_scheduled"] == r["pods_not_on_their_sets_node"] == 0, r
        assert r["gpus_without_a_record"] == 0, r
        assert r["bound_gpus_after_release"] == r["open_records_after_release"] == 0, r
