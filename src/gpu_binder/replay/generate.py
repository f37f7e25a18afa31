"""Generated VM-cloud workloads: order mixes and clusters no one tuned placement for.

The Alibaba trace is one cluster and one mix; a policy tuned on it may lean on what it
happens to hold. A *draw* is one random workload: the parameters of an order mix and a
cluster (`Params`, drawn by `draw_params` from the draw's number alone, so draw 1017 is
the same workload everywhere), and from them the cluster's nodes (`build_nodes`) and, per
seed, a stream of arrivals (`draw_arrivals`).

What a draw varies, each as a GPU-VM cloud would:

- **GPU counts**: the shares of 1-, 2-, 4- and 8-GPU VMs;
- **model restrictions**: the share of VMs naming GPU models, how many models each names
  (1 or 2), and whether the named models follow their capacity or not (a model everyone
  wants and the cluster has little of);
- **CPU and memory per GPU**: one to three cloud-instance flavors (vCPUs and GiB per GPU,
  as the g5/p4d/a2/NCv3 families size them), each a share of the orders;
- **arrivals**: independent draws (the ATC '23 method), tenants ordering groups of
  identical VMs at once, or a mix that drifts as the cluster fills (the early orders are
  no picture of the late ones); Poisson times between groups, and lifetimes exponential
  or heavy-tailed (lognormal), for the timeline mode;
- **cluster**: a subset of a node list (some of its nodes, maybe not all its models), the
  whole list, or a synthetic list of other shapes (several models, nodes of 1 to 8 GPUs,
  often many 1-GPU nodes, their own CPU and memory per GPU).

Randomness comes from `random.Random` seeded with strings, and sets are walked sorted,
so a draw does not depend on the interpreter's hash seed.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from gpu_binder.replay.order import Order
from gpu_binder.replay.trace import NODE_COLUMNS, OPTIONAL_POD_COLUMNS, POD_COLUMNS, Node

GPU_COUNTS = (1, 2, 4, 8)
GIB = 1024
# Cloud-instance flavors: vCPUs and memory per GPU as a share of what the cluster's nodes
# have per GPU. A provider sizes its instances to its hosts (a g5.48xlarge host of 8 GPUs
# sells 1-GPU instances from 1/6 of a GPU's share of its cores, g5.xlarge, to 2.7 times
# it, g5.16xlarge), so most flavors take a GPU's share or less and a few take more.
FLAVOR_RATIOS = (0.17, 0.25, 0.33, 0.5, 0.5, 0.67, 0.75, 0.75, 1.0, 1.0, 1.25, 1.5)
# Node shapes of synthetic clusters: GPUs per node, and per GPU (cores, GiB).
NODE_GPUS = (1, 2, 4, 8)
NODE_CORES_PER_GPU = (8, 12, 16, 24, 32)
NODE_GIB_PER_GPU = (32, 48, 64, 96, 128, 192)
SYNTHETIC_MODELS = ("H100", "A100", "L40S", "A10", "L4", "T4")
Arrival = Literal["shuffled", "bursts", "drift"]
Lifetime = Literal["exponential", "lognormal"]
ClusterKind = Literal["trace", "subset", "synthetic"]
DEFAULT_LOAD = 1.3
# GPUs of subset and synthetic clusters.
MIN_GPUS, MAX_GPUS = 1000, 3000


@dataclass(frozen=True, slots=True)
class Flavor:
    """A cloud-instance shape: vCPUs and memory per GPU as shares of what the cluster's
    nodes have per GPU (the median GPU's node), and its share of the orders."""

    cpu_ratio: float
    memory_ratio: float
    weight: float


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Nodes of a synthetic cluster: `count` nodes of `gpus` GPUs of `model`."""

    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    count: int


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """Which nodes a draw runs on.

    `trace`: the whole node list given; `subset`: nodes of it picked at random, of
    `models` of its models (0: all), until they hold `gpus` GPUs (or every node of those
    models); `synthetic`: the `nodes` shapes, the base list unused.
    """

    kind: ClusterKind
    gpus: int = 0
    models: int = 0
    nodes: tuple[NodeShape, ...] = ()


@dataclass(frozen=True, slots=True)
class Params:
    """One draw's workload: the order mix, the arrival process, the cluster."""

    draw: int
    gpu_mix: tuple[float, ...]
    """Shares of 1-, 2-, 4- and 8-GPU orders (GPU_COUNTS), summing to 1."""
    restricted: float
    """Share of orders naming GPU models."""
    width: int
    """How many models a restricted order names (fewer when the cluster has fewer)."""
    by_capacity: bool
    """Restricted orders name models in proportion to their GPUs (else to its square
    root: small models are wanted beyond their size)."""
    flavors: tuple[Flavor, ...]
    arrival: Arrival
    burst_mean: float
    """bursts: the mean size of a tenant's group of identical orders."""
    drift_mix: tuple[float, ...]
    """drift: the GPU mix once arrivals reach the capacity (gpu_mix at the start)."""
    drift_restricted: float
    """drift: the restricted share once arrivals reach the capacity."""
    lifetime: Lifetime
    lifetime_mean_s: float
    cluster: ClusterShape

    def describe(self) -> dict[str, object]:
        """The parameters as plain data, for reports."""
        return asdict(self)


def draw_params(draw: int) -> Params:
    """The parameters of draw number `draw` (reproducible from the number alone)."""
    rng = random.Random(f"generate:{draw}")
    arrival: Arrival = rng.choice(("shuffled", "shuffled", "bursts", "drift"))
    return Params(
        draw=draw,
        gpu_mix=_gpu_mix(rng),
        restricted=round(rng.choice((0.0, rng.uniform(0.05, 0.6))), 3),
        width=rng.choice((1, 1, 2)),
        by_capacity=rng.random() < 0.5,
        flavors=tuple(
            Flavor(
                rng.choice(FLAVOR_RATIOS), rng.choice(FLAVOR_RATIOS), round(rng.uniform(0.2, 1), 3)
            )
            for _ in range(rng.randint(1, 3))
        ),
        arrival=arrival,
        burst_mean=round(rng.uniform(2.0, 16.0), 2),
        drift_mix=_gpu_mix(rng),
        drift_restricted=round(rng.uniform(0.0, 0.6), 3),
        lifetime=rng.choice(("exponential", "lognormal")),
        lifetime_mean_s=float(rng.choice((600, 3600, 6 * 3600, 86400))),
        cluster=_cluster_shape(rng),
    )


def _gpu_mix(rng: random.Random) -> tuple[float, ...]:
    """Shares of 1/2/4/8-GPU orders: a few sizes dominate, any may be absent."""
    weights = [rng.expovariate(1.0) * (rng.random() < 0.85) for _ in GPU_COUNTS]
    if not any(weights):
        weights[0] = 1.0
    total = sum(weights)
    return tuple(round(w / total, 4) for w in weights)


def _cluster_shape(rng: random.Random) -> ClusterShape:
    roll = rng.random()
    if roll < 0.1:
        return ClusterShape("trace")
    if roll < 0.55:
        return ClusterShape("subset", gpus=_size(rng), models=rng.choice((0, 0, 2, 3)))
    models = rng.sample(SYNTHETIC_MODELS, rng.randint(1, 4))
    singles = rng.random() < 0.5  # another production cluster: mostly 1-GPU nodes
    target = _size(rng)
    weights = [rng.uniform(0.3, 1.0) for _ in models]
    shapes: list[NodeShape] = []
    for model, weight in zip(models, weights, strict=True):
        gpus_of_model = max(1, round(target * weight / sum(weights)))
        sizes = sorted(rng.sample(NODE_GPUS, rng.randint(1, 2)))
        if singles and sizes[0] != 1 and rng.random() < 0.7:
            sizes = sorted({1, sizes[-1]})
        if len(sizes) == 1:
            shares = [1.0]
        else:
            shares = [0.7, 0.3] if singles and sizes[0] == 1 else [0.5, 0.5]
        for size, share in zip(sizes, shares, strict=True):
            count = max(1, round(gpus_of_model * share / size))
            cores, gib = rng.choice(NODE_CORES_PER_GPU), rng.choice(NODE_GIB_PER_GPU)
            shapes.append(NodeShape(model, size, size * cores * 1000, size * gib * GIB, count))
    return ClusterShape("synthetic", nodes=tuple(shapes))


def _size(rng: random.Random) -> int:
    """GPUs of a generated cluster: big enough that one order is a small share of it."""
    return rng.randint(MIN_GPUS, MAX_GPUS)


def build_nodes(params: Params, base: Sequence[Node]) -> list[Node]:
    """The draw's cluster: a subset of `base`, all of it, or its own synthetic nodes."""
    shape = params.cluster
    if shape.kind == "synthetic":
        nodes = []
        for s in shape.nodes:
            for i in range(s.count):
                name = f"{s.model.lower()}-{s.gpus}g-{s.cpu_milli // 1000}c-{i:04d}"
                nodes.append(Node(name, s.cpu_milli, s.memory_mib, s.gpus, s.model))
        return nodes
    gpu_nodes = [n for n in base if n.gpus > 0]
    if shape.kind == "trace":
        return gpu_nodes
    rng = random.Random(f"cluster:{params.draw}")
    models = sorted({n.model for n in gpu_nodes})
    if 0 < shape.models < len(models):
        # Models in a random order, as many as asked and then more until they hold
        # MIN_GPUS: two small models alone would make a cluster one order is much of.
        rng.shuffle(models)
        capacity = {m: sum(n.gpus for n in gpu_nodes if n.model == m) for m in models}
        k = shape.models
        while k < len(models) and sum(capacity[m] for m in models[:k]) < MIN_GPUS:
            k += 1
        models = sorted(models[:k])
    kept = [i for i, n in enumerate(gpu_nodes) if n.model in models]
    rng.shuffle(kept)
    chosen: list[int] = []
    gpus = 0
    for i in kept:
        if gpus >= shape.gpus:
            break
        chosen.append(i)
        gpus += gpu_nodes[i].gpus
    return [gpu_nodes[i] for i in sorted(chosen)]


@dataclass(frozen=True, slots=True)
class _Kind:
    gpus: int
    cpu_milli: int
    memory_mib: int
    models: frozenset[str]


class _Sampler:
    """Order kinds drawn from a draw's mix, at a point of the fill for drifting mixes."""

    def __init__(self, params: Params, nodes: Sequence[Node], rng: random.Random) -> None:
        self.params = params
        self.rng = rng
        capacity: dict[str, int] = {}
        for n in nodes:
            if n.gpus:
                capacity[n.model] = capacity.get(n.model, 0) + n.gpus
        self.models = sorted(capacity)
        self.model_weights = [
            capacity[m] if params.by_capacity else math.sqrt(capacity[m]) for m in self.models
        ]
        self.flavor_weights = [f.weight for f in params.flavors]
        gpus = sum(capacity.values())
        self.cpu_per_gpu = _median_per_gpu(nodes, lambda n: n.cpu_milli)
        self.mib_per_gpu = _median_per_gpu(nodes, lambda n: n.memory_mib)
        # A provider sells no VM bigger than its hosts: GPU counts no node holds are not
        # ordered, more GPUs of a count than nodes that hold it have are not ordered (its
        # share of the GPUs ordered is at most theirs), and a VM asks for at most its GPUs'
        # share of the CPU and memory of the roomiest node that holds it.
        self.per_gpu_cap = {
            g: (
                max(n.cpu_milli / n.gpus for n in nodes if n.gpus >= g),
                max(n.memory_mib / n.gpus for n in nodes if n.gpus >= g),
            )
            for g in GPU_COUNTS
            if any(n.gpus >= g for n in nodes)
        }
        holding = {g: sum(n.gpus for n in nodes if n.gpus >= g) / gpus for g in GPU_COUNTS}
        self.start_mix = _sold(params.gpu_mix, holding)
        self.end_mix = _sold(params.drift_mix, holding)

    def kind(self, progress: float) -> _Kind:
        """An order kind; `progress` is the share of capacity requested so far (drift)."""
        p, rng = self.params, self.rng
        mix, restricted = self.start_mix, p.restricted
        if p.arrival == "drift":
            t = min(1.0, progress)
            mix = [(1 - t) * a + t * b for a, b in zip(mix, self.end_mix, strict=True)]
            restricted = (1 - t) * p.restricted + t * p.drift_restricted
        gpus = rng.choices(GPU_COUNTS, weights=mix)[0]
        flavor = rng.choices(p.flavors, weights=self.flavor_weights)[0]
        models: frozenset[str] = frozenset()
        if self.models and rng.random() < restricted:
            models = self._models(min(p.width, len(self.models)))
        # Whole vCPUs and GiB per GPU, as instance types are sized.
        most_cpu, most_memory = self.per_gpu_cap[gpus]
        cpu = min(flavor.cpu_ratio * self.cpu_per_gpu, most_cpu)
        memory = min(flavor.memory_ratio * self.mib_per_gpu, most_memory)
        # Whole vCPUs and GiB per GPU, as instance types are sized.
        cpu_milli = max(1, int(cpu // 1000)) * 1000
        memory_mib = max(1, int(memory // GIB)) * GIB
        return _Kind(gpus, gpus * cpu_milli, gpus * memory_mib, models)

    def _models(self, width: int) -> frozenset[str]:
        chosen: set[str] = set()
        while len(chosen) < width:
            chosen.add(self.rng.choices(self.models, weights=self.model_weights)[0])
        return frozenset(chosen)


def _median_per_gpu(nodes: Sequence[Node], amount: Callable[[Node], int]) -> float:
    """What the median GPU's node has of `amount` per GPU (a few roomy nodes do not move it)."""
    shares = sorted((amount(n) / n.gpus, n.gpus) for n in nodes if n.gpus)
    half = sum(g for _, g in shares) / 2
    seen = 0
    for share, g in shares:
        seen += g
        if seen >= half:
            return share
    return 0.0


def _sold(mix: Sequence[float], holding: dict[int, float]) -> list[float]:
    """The shares of orders per GPU count once orders of a count and larger ask for no
    larger share of the GPUs ordered than the nodes that hold them have of the cluster's
    (`holding`); what is over goes to the next smaller count, as a tenant takes the
    largest VM there is."""
    total = sum(g * w for g, w in zip(GPU_COUNTS, mix, strict=True)) or 1.0
    gpus = [g * w / total for g, w in zip(GPU_COUNTS, mix, strict=True)]
    carry = above = 0.0
    for i in reversed(range(len(GPU_COUNTS))):
        gpus[i] += carry
        limit = max(0.0, holding[GPU_COUNTS[i]] - above)
        carry = max(0.0, gpus[i] - limit)
        gpus[i] -= carry
        above += gpus[i]
    shares = [share / g for g, share in zip(GPU_COUNTS, gpus, strict=True)]
    count = sum(shares)
    return [w / count for w in shares]


def draw_arrivals(
    params: Params, nodes: Sequence[Node], seed: int, load: float = DEFAULT_LOAD
) -> list[Order]:
    """Seed `seed`'s arrivals of the draw, in arrival order, until they ask for `load` ×
    the cluster's GPUs. Each order has its creation and deletion time (seconds)."""
    capacity = sum(n.gpus for n in nodes)
    if capacity <= 0:
        raise ValueError("the cluster has no GPUs")
    rng = random.Random(f"arrivals:{params.draw}:{seed}")
    sampler = _Sampler(params, nodes, rng)
    mean_gpus = sum(g * s for g, s in zip(GPU_COUNTS, sampler.start_mix, strict=True))
    # Groups arrive as a Poisson stream offering about the capacity over a lifetime.
    group = params.burst_mean if params.arrival == "bursts" else 1.0
    rate = capacity / (mean_gpus * group * params.lifetime_mean_s)
    out: list[Order] = []
    requested = 0
    moment = 0.0
    while requested < load * capacity:
        moment += rng.expovariate(rate)
        kind = sampler.kind(requested / capacity)
        size = 1 if params.arrival != "bursts" else _geometric(rng, params.burst_mean)
        for _ in range(size):
            created = round(moment)
            lifetime = _lifetime(rng, params.lifetime, params.lifetime_mean_s)
            out.append(
                Order(
                    name=f"d{params.draw}-s{seed}-{len(out):06d}",
                    gpus=kind.gpus,
                    cpu_milli=kind.cpu_milli,
                    memory_mib=kind.memory_mib,
                    models=kind.models,
                    created_s=created,
                    deleted_s=created + max(1, round(lifetime)),
                )
            )
            requested += kind.gpus
            if requested >= load * capacity:
                break
    return out


def _geometric(rng: random.Random, mean: float) -> int:
    """A group size of at least 1 with the given mean."""
    if mean <= 1:
        return 1
    p = 1.0 / mean
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


def _lifetime(rng: random.Random, kind: Lifetime, mean: float) -> float:
    if kind == "exponential":
        return rng.expovariate(1.0 / mean)
    sigma = 1.5  # heavy-tailed: the median VM lives a third of the mean
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


def write(params: Params, nodes: Sequence[Node], arrivals: Sequence[Order], out: Path) -> None:
    """The draw as trace files: nodes.csv and pods.csv (in the Alibaba trace's columns, so
    `gpu-binder replay out/nodes.csv out/pods.csv` replays it as a trace) and params.json."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "nodes.csv").open("w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle)
        w.writerow(NODE_COLUMNS)
        for n in nodes:
            w.writerow((n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model))
    with (out / "pods.csv").open("w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle)
        w.writerow((*POD_COLUMNS, *OPTIONAL_POD_COLUMNS))
        for o in arrivals:
            spec = "|".join(sorted(o.models))
            w.writerow(
                (o.name, o.cpu_milli, o.memory_mib, o.gpus, 1000, spec, o.created_s, o.deleted_s)
            )
    (out / "params.json").write_text(json.dumps(params.describe(), indent=2) + "\n")
