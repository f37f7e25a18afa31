"""LeastStranded, the default policy: the node where the order strands the fewest GPUs."""

from __future__ import annotations

import pytest

from gpu_binder.placement import (
    Candidate,
    Demand,
    Fit,
    Mix,
    Outlook,
    least_stranded,
    pool_pressures,
    pressures,
    rank,
)
from gpu_binder.placement.mix import UNLIMITED
from gpu_binder.placement.policy import STRANDED_WEIGHT, starves, stranding

A = frozenset({"a"})
GiB = 1 << 30


def best(
    free: dict[str, int],
    count: int,
    mix: Mix,
    *,
    cpu_free: dict[str, int] | None = None,
    cpu: int = 0,
    whole: int = 8,
) -> str:
    candidates = [
        Candidate(node, {"a": n}, cpu_free=(cpu_free or {}).get(node, 10**9))
        for node, n in free.items()
    ]
    fits = rank({"a": count}, candidates, least_stranded, Outlook(mix, {}, {"a": whole}), cpu)
    return fits[0].node


def mix_of(*demands: Demand) -> Mix:
    m = Mix()
    for d in demands:
        m.add(d)
    return m


def test_with_no_order_known_a_whole_node_stays_whole() -> None:
    # The whole-node floor: an 8-GPU order could only ever use node-b whole.
    assert best({"node-a": 3, "node-b": 8}, 1, Mix()) == "node-a"


def test_a_free_pair_stays_whole_for_the_two_gpu_orders_of_the_mix() -> None:
    mix = mix_of(Demand(1, 0, 0, A), Demand(2, 0, 0, A))
    # Taking one of node-a's two would leave a lone GPU only 1-GPU orders can use.
    assert best({"node-a": 2, "node-b": 3}, 1, mix, whole=4) == "node-b"


def test_it_keeps_cpu_for_the_gpus_left_on_a_node() -> None:
    mix = mix_of(Demand(1, 8_000, 0, A))
    # On node-a the order would leave 3 GPUs and 4 cores: no order of the mix fits there.
    free = {"node-a": 4, "node-b": 4}
    assert best(free, 1, mix, cpu_free={"node-a": 12_000, "node-b": 40_000}, cpu=8_000) == (
        "node-b"
    )


def test_on_equal_cost_it_takes_the_fullest_node_then_the_first_name() -> None:
    mix = mix_of(Demand(1, 0, 0, A))
    assert best({"node-c": 5, "node-b": 6, "node-a": 6}, 1, mix) == "node-c"
    assert best({"node-b": 6, "node-a": 6}, 1, mix) == "node-a"


def test_a_class_restricted_orders_need_is_left_to_them() -> None:
    mix = mix_of(Demand(1, 0, 0, frozenset({"b"})), Demand(1, 0, 0, frozenset({"a", "b"})))
    outlook = Outlook(mix, {"a": 0.0, "b": 0.9}, {})
    fits = rank({"b": 1}, [Candidate("b1", {"b": 4})], least_stranded, outlook) + rank(
        {"a": 1}, [Candidate("a1", {"a": 4})], least_stranded, outlook
    )
    scores = {f.node: least_stranded(f, outlook) for f in fits}
    assert scores["a1"] > scores["b1"]


def test_it_leaves_cpu_for_the_orders_after_the_next() -> None:
    # Light (2-core) and heavy (10-core) orders alike: 6 cores per GPU on average.
    mix = mix_of(Demand(1, 2_000, 0, A), Demand(1, 10_000, 0, A))
    # A heavy order leaves node-a 2 GPUs and 12 cores: the next order of either kind
    # fits, but after another heavy one its last GPU has 2 cores, which only light orders
    # can use. Node-b keeps 22 cores for its 2. Counting only the next order, both looked
    # alike and node-a won by name.
    free = {"node-a": 3, "node-b": 3}
    cpu_free = {"node-a": 22_000, "node-b": 32_000}
    assert best(free, 1, mix, cpu_free=cpu_free, cpu=10_000) == "node-b"


def test_breaking_a_whole_node_costs_its_gpus_times_its_whole_node_risk() -> None:
    mix = mix_of(Demand(1, 0, 0, A))
    outlook = Outlook(mix, {}, {"a": 8}, {"a": 0.25})
    plain = Outlook(mix, {}, {"a": 8})
    [whole] = rank({"a": 1}, [Candidate("n", {"a": 8})], least_stranded, outlook)
    [partial] = rank({"a": 1}, [Candidate("m", {"a": 7})], least_stranded, outlook)
    assert least_stranded(whole, outlook) == least_stranded(whole, plain) - 8 * 0.25
    assert least_stranded(partial, outlook) == least_stranded(partial, plain)


def test_a_node_no_claiming_order_fits_pays_no_pressure() -> None:
    # Only 4-GPU orders claim a (1-GPU orders fit b as well): a's 1-GPU node is no use
    # to them, a node with 4 free is.
    mix = mix_of(Demand(4, 0, 0, A), Demand(1, 0, 0, frozenset({"a", "b"})))
    mix.set_shapes({"a": frozenset({(1, 8, 8), (8, 8, 8)}), "b": frozenset({(8, 8, 8)})})
    outlook = Outlook(mix, {"a": 0.5}, {"a": 8})
    unclaimed = Outlook(mix, {}, {"a": 8})
    small = Fit("s", 0, 1, "a", 8, 8)
    big = Fit("b", 3, 4, "a", 8, 8)
    assert least_stranded(small, outlook) == least_stranded(small, unclaimed)
    assert least_stranded(big, outlook) == least_stranded(big, unclaimed) - 0.5


def test_an_entirely_free_node_pays_its_pool_s_price_though_no_known_claim_fits_it() -> None:
    # Sweep draw 1 in small: the known claims are pairs of 48 cores, which a's 4-GPU,
    # 32-core nodes cannot hold; the pool's price is the prior's, for orders not yet seen
    # that may need the whole node. Once broken, the node is priced by the claims it fits.
    ab = frozenset({"a", "b"})
    mix = mix_of(Demand(2, 48, 0, ab), Demand(2, 12, 0, ab))
    mix.set_shapes({"a": frozenset({(4, 32, 256), (2, 48, 192)}), "b": frozenset({(2, 64, 384)})})
    assert not mix.serves_claims("a", 4, 32, 256)
    pool = ("a", 4, 32, 256)
    outlook = Outlook(mix, {"a": 0.2}, {"a": 4}, {}, {pool: 1.5})
    whole = Fit("w", 2, 4, "a", 32, 256, 12, 0, (4, 32, 256))
    broken = Fit("p", 0, 2, "a", 20, 256, 12, 0, (4, 32, 256))
    # The whole node: its 2 GPUs taken at the pool's 1.5. The broken one: only the GPUs
    # it strands, at the class's 0.2.
    strands = stranding(whole, outlook)
    assert least_stranded(whole, outlook) == pytest.approx(-(2 * 1.5 + STRANDED_WEIGHT * strands))
    strands = stranding(broken, outlook)
    assert least_stranded(broken, outlook) == pytest.approx(
        -(0.2 * max(0.0, strands) + STRANDED_WEIGHT * strands)
    )


def default_trace_in_small() -> tuple[Outlook, Fit, Fit]:
    """The default trace online (seed 43) in small: 2-GPU orders asking 157 GiB fit only
    nodes with that much memory, so they claim a (through its 8-GPU, 256 GiB nodes) and
    b, priced alike. A 24-core 1-GPU order on a's 4-GPU, 32-core, 128 GiB node — no use
    to the claims — leaves 3 GPUs with 8 cores; on b's 2-GPU, 104-core node it strands
    almost nothing."""
    everyone = frozenset({"a", "b", "c"})
    mix = mix_of(
        Demand(2, 30_000, 157 * GiB, everyone),
        *[Demand(1, 24_000, 90 * GiB, everyone)] * 3,
        *[Demand(1, 3_000, 5 * GiB, everyone)] * 6,
    )
    mix.set_shapes(
        {
            "a": frozenset({(4, 32_000, 128 * GiB), (8, 64_000, 256 * GiB)}),
            "b": frozenset({(2, 104_000, 512 * GiB)}),
            "c": frozenset({(1, 128_000, 1024 * GiB)}),
        }
    )
    outlook = Outlook(mix, {"a": 0.3, "b": 0.3}, {"a": 8, "b": 2, "c": 1})
    taken = (24_000, 90 * GiB)
    cramped = Fit("a-4gpu-32core", 3, 4, "a", 32_000, 128 * GiB, *taken)
    roomy = Fit("b-2gpu-104core", 1, 2, "b", 104_000, 512 * GiB, *taken)
    return outlook, cramped, roomy


def test_on_a_node_no_claim_fits_the_gpus_an_order_strands_pay_the_pressure() -> None:
    # The GPUs stranded there are lost to the orders that could have used them, which
    # take as many from the claimed classes instead.
    outlook, cramped, _ = default_trace_in_small()
    assert not outlook.mix.serves_claims("a", 4, 32_000, 128 * GiB)
    unclaimed = Outlook(outlook.mix, {}, outlook.whole)
    stranded = stranding(cramped, outlook)
    assert stranded > 0.5
    assert least_stranded(cramped, outlook) == pytest.approx(
        least_stranded(cramped, unclaimed) - 0.3 * stranded
    )


def test_a_node_no_claim_fits_is_no_cheaper_place_to_strand_gpus() -> None:
    # Free of the price, the cramped node won, and eight such nodes each lost a GPU to
    # no cores (9 GPUs unallocated at 100%, against 0-1 with the stranding priced).
    outlook, cramped, roomy = default_trace_in_small()
    assert least_stranded(roomy, outlook) > least_stranded(cramped, outlook)


def test_a_pool_the_class_claims_cannot_use_is_priced_by_the_claims_it_can_take() -> None:
    # Sweep draw 1000 in small: most of a's claims ask 96 memory, which only its 8-GPU
    # nodes have; its 1-GPU, 32-memory nodes hold only the 1-GPU, 31-memory orders. Priced
    # at a's pressure, those orders went to b and a's 1-GPU nodes were left empty.
    b = frozenset({"b"})
    mix = mix_of(
        Demand(1, 10, 31, A),
        *[Demand(1, 16, 96, A)] * 4,
        *[Demand(1, 2, 8, b)] * 2,
        *[Demand(1, 2, 8, A | b)] * 5,
    )
    mix.set_shapes({"a": frozenset({(1, 16, 32), (8, 96, 768)}), "b": frozenset({(1, 32, 96)})})
    free = {"a": 180, "b": 100}
    pools = pool_pressures(
        mix, {("a", 1, 16, 32): 100, ("a", 8, 96, 768): 80, ("b", 1, 32, 96): 100}
    )
    outlook = Outlook(mix, pressures(mix, free, free), {"a": 8, "b": 1}, {}, pools)
    a1 = Fit("a1", 0, 1, "a", 16, 32, 10, 31, (1, 16, 32))
    b1 = Fit("b1", 0, 1, "b", 32, 96, 10, 31, (1, 32, 96))
    assert outlook.pressure["a"] > outlook.pressure["b"]
    assert least_stranded(a1, outlook) > least_stranded(b1, outlook)


def test_filling_a_gap_only_the_order_could_use_strands_nothing() -> None:
    # The 2-GPU orders never fit the lone GPU: they lose nothing when it is taken.
    mix = Mix()
    mix.add(Demand(1, 8_000, 0, A))
    mix.add(Demand(2, 64_000, 0, A), 3)
    gap = Fit("node-a", 0, 1, "a", cpu_free=8_000, cpu=8_000)
    assert stranding(gap, Outlook(mix, {}, {"a": 2})) == pytest.approx(0.0)


def test_a_node_the_other_orders_cannot_use_is_no_cheaper_to_fill() -> None:
    mix = mix_of(Demand(1, 24_000, 0, A), Demand(2, 64_000, 0, A))
    # On node-a the order leaves a GPU with 8 cores, which no order of the mix can use;
    # that the 2-GPU orders never fitted node-a does not make it cheaper.
    cpu_free = {"node-a": 32_000, "node-b": 128_000}
    assert best({"node-a": 2, "node-b": 4}, 1, mix, cpu_free=cpu_free, cpu=24_000, whole=4) == (
        "node-b"
    )


L4 = frozenset({"l4"})
PAIR, QUAD = (2, 32_000, 128 * GiB), (4, 128_000, 384 * GiB)
SINGLE_24 = (24_000, 48 * GiB)


def test_a_gpu_left_without_its_share_of_the_node_s_cores_costs_as_one_taken() -> None:
    # Sweep draw 2006 in small: the only orders known are 24-core singles, which could
    # not use a 2-GPU, 32-core node's GPUs together either, so the mix reads the GPU one
    # leaves there with 8 cores as stranded already. The node was built for 16 cores a
    # GPU: half of that GPU is lost to the orders it was bought for (8 of its 16 cores),
    # as surely as one taken, and that outweighs the 4-GPU pool's dearer price.
    mix = mix_of(*[Demand(1, *SINGLE_24, L4)] * 3)
    mix.set_shapes({"l4": frozenset({PAIR, QUAD})})
    pools = {("l4", *PAIR): 1.0, ("l4", *QUAD): 1.1}
    outlook = Outlook(mix, {"l4": 1.0}, {"l4": 4}, {}, pools)
    on_pair = Fit("pair", 1, 2, "l4", PAIR[1], PAIR[2], *SINGLE_24, PAIR)
    on_quad = Fit("quad", 3, 4, "l4", QUAD[1], QUAD[2], *SINGLE_24, QUAD)
    assert (starves(on_pair), starves(on_quad)) == pytest.approx((0.5, 0.0))
    assert least_stranded(on_quad, outlook) > least_stranded(on_pair, outlook)


def test_an_order_at_the_node_s_share_a_gpu_starves_none() -> None:
    assert starves(Fit("pair", 1, 2, "l4", PAIR[1], PAIR[2], 16_000, 64 * GiB, PAIR)) == 0


def test_gpus_the_node_could_not_feed_before_are_not_charged_again() -> None:
    # 40 cores for 3 GPUs of a 32-core-a-GPU node feed 1.25 of them; after the order, 16
    # cores for 2 feed half of one: 1.5 unfed, no more than the 1.75 it found.
    partly = Fit("quad", 2, 3, "l4", 40_000, QUAD[2], *SINGLE_24, QUAD)
    assert starves(partly) == 0


def test_a_node_that_reports_no_cpu_or_memory_starves_no_gpu() -> None:
    shape = (2, UNLIMITED, UNLIMITED)
    assert starves(Fit("pair", 1, 2, "l4", UNLIMITED, UNLIMITED, *SINGLE_24, shape)) == 0
