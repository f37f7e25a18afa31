"""Picking devices on one node: one NUMA node or NVLink domain when the class asks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from gpu_binder.api.types import GPUDevice


def domain_of(d: GPUDevice, topology: str) -> str:
    """The topology domain a device reports; "" when it reports none."""
    if topology == "NVLink":
        return d.spec.nvlink_domain or ""
    if topology == "NUMA" or topology == "Node":
        # Node topology still prefers one NUMA node: it keeps the other domains whole.
        return "" if d.spec.numa_node is None else str(d.spec.numa_node)
    return ""


def pick_devices(
    free: Sequence[GPUDevice],
    count: int,
    topology: str,
    domain_sizes: Mapping[str, int] | None = None,
) -> list[GPUDevice] | None:
    """count devices from free, from the tightest domain that holds them all.

    With topology NUMA or NVLink an order must sit inside one domain when any domain of
    the node is that big (domain_sizes: all devices per domain, free or not); an order
    bigger than every domain takes whole domains in turn.
    """
    if count <= 0:
        return []
    if len(free) < count:
        return None
    domains: dict[str, list[GPUDevice]] = defaultdict(list)
    for d in free:
        domains[domain_of(d, topology)].append(d)
    fitting = [ds for ds in domains.values() if len(ds) >= count]
    if fitting:
        # The tightest domain that fits leaves the roomier ones whole.
        best = min(fitting, key=lambda ds: (len(ds), _first_slot(ds)))
        return sorted(best, key=_slot_key)[:count]
    if topology != "Node":
        sizes = domain_sizes or {k: len(v) for k, v in domains.items()}
        if max(sizes.values(), default=0) >= count:
            return None  # a domain could hold it once its devices are free again
    # Span domains, fullest first, so the fewest domains are split.
    chosen: list[GPUDevice] = []
    for ds in sorted(domains.values(), key=lambda ds: (-len(ds), _first_slot(ds))):
        chosen.extend(sorted(ds, key=_slot_key))
        if len(chosen) >= count:
            break
    return chosen[:count]


def _slot_key(d: GPUDevice) -> tuple[int, str]:
    return (d.spec.slot if d.spec.slot is not None else 1 << 30, d.metadata.name)


def _first_slot(ds: Sequence[GPUDevice]) -> int:
    return min(_slot_key(d)[0] for d in ds)
