"""Placement, directly: properties of gpu_binder.placement for any nodes and any order."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUDevice, GPUDeviceSpec
from gpu_binder.placement import POLICIES, Candidate, choose, pick_devices
from gpu_binder.placement.topology import domain_of

from .cluster import gpu_name, pci

FAST = settings(max_examples=150, deadline=None)
CLASS = "h100"

# Free devices per node (node name → free slots), 1..6 nodes of up to 8 GPUs.
frees = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=6)
orders = st.integers(min_value=1, max_value=8)
policies = st.sampled_from(sorted(POLICIES))


def device(node: str, slot: int, numa: int | None = None) -> GPUDevice:
    return GPUDevice(
        metadata=ObjectMeta(name=gpu_name(node, slot)),
        spec=GPUDeviceSpec.model_validate(
            {
                "nodeName": node,
                "pciAddress": pci(slot),
                "slot": slot,
                "deviceID": "0x2330",
                "numaNode": numa,
            }
        ),
    )


def world(free: Sequence[int]) -> dict[str, list[GPUDevice]]:
    return {
        f"node-{i}": [device(f"node-{i}", s, numa=s // 4) for s in range(n)]
        for i, n in enumerate(free)
    }


def place(free: Sequence[int], count: int, policy: str) -> tuple[str, list[GPUDevice]] | None:
    devices = world(free)
    candidates = [Candidate(node, {CLASS: len(ds)}) for node, ds in devices.items()]
    placed = choose({CLASS: count}, candidates, POLICIES[policy], lambda _c, node: devices[node])
    return None if placed is None else (placed.node, list(placed.devices))


@FAST
@given(frees, orders, policies)
def test_a_set_is_placed_whole_on_one_node_from_its_free_devices(
    free: list[int], count: int, policy: str
) -> None:
    placed = place(free, count, policy)
    if placed is None:
        return
    node, chosen = placed
    assert len(chosen) == count
    assert len({d.metadata.name for d in chosen}) == count, "no device twice"
    assert {d.spec.node_name for d in chosen} == {node}, "a set never spans nodes"
    assert count <= free[int(node.removeprefix("node-"))], "never beyond free capacity"


@FAST
@given(frees, orders, policies)
def test_an_order_is_refused_only_when_no_node_has_room_for_it(
    free: list[int], count: int, policy: str
) -> None:
    assert (place(free, count, policy) is None) == all(n < count for n in free)


@FAST
@given(frees, orders)
def test_pack_takes_the_fullest_node_that_fits(free: list[int], count: int) -> None:
    placed = place(free, count, "Pack")
    if placed is None:
        return
    leftover = free[int(placed[0].removeprefix("node-"))] - count
    assert leftover == min(n - count for n in free if n >= count)


@FAST
@given(frees, orders)
def test_pack_never_splits_a_node_an_equal_order_could_use_whole(
    free: list[int], count: int
) -> None:
    placed = place(free, count, "Pack")
    if placed is None:
        return
    largest = max(free)
    after = list(free)
    after[int(placed[0].removeprefix("node-"))] -= count
    # A node the order fits exactly is used whole; a bigger free set stays whole unless
    # the order needs it (it is the only node with room) .
    if count in free:
        assert after.count(0) > free.count(0)
    if any(count <= n < largest for n in free) or free.count(largest) > 1:
        assert max(after) == largest


@FAST
@given(frees, orders)
def test_spread_takes_the_emptiest_node_that_fits(free: list[int], count: int) -> None:
    placed = place(free, count, "Spread")
    if placed is None:
        return
    leftover = free[int(placed[0].removeprefix("node-"))] - count
    assert leftover == max(n - count for n in free if n >= count)


# --- topology ---------------------------------------------------------------------------

domains = st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=8)


@FAST
@given(domains, st.integers(min_value=1, max_value=8), st.sampled_from(["NUMA", "Node"]))
def test_a_set_stays_inside_one_numa_node_when_one_can_hold_it(
    numa: list[int], count: int, topology: str
) -> None:
    free = [device("node-a", s, numa=n) for s, n in enumerate(numa)]
    picked = pick_devices(free, count, topology)
    sizes: dict[str, int] = {}
    for d in free:
        sizes[domain_of(d, topology)] = sizes.get(domain_of(d, topology), 0) + 1
    if count > len(free):
        assert picked is None
        return
    assert picked is not None and len(picked) == count
    assert len({d.metadata.name for d in picked}) == count
    if max(sizes.values()) >= count:
        assert len({d.spec.numa_node for d in picked}) == 1
        chosen = picked[0].spec.numa_node
        assert sizes[str(chosen)] == min(n for n in sizes.values() if n >= count), "tightest"


@FAST
@given(domains, domains, st.integers(min_value=1, max_value=8))
def test_a_numa_order_waits_rather_than_spanning_a_domain_that_could_hold_it(
    all_numa: list[int], busy: list[int], count: int
) -> None:
    every = [device("node-a", s, numa=n) for s, n in enumerate(all_numa)]
    taken = {s for s in busy if s < len(every)}
    free = [d for d in every if d.spec.slot not in taken]
    sizes: dict[str, int] = {}
    for d in every:
        sizes[domain_of(d, "NUMA")] = sizes.get(domain_of(d, "NUMA"), 0) + 1
    picked = pick_devices(free, count, "NUMA", sizes)
    if picked is not None and max(sizes.values()) >= count:
        assert len({d.spec.numa_node for d in picked}) == 1
