"""A VM order as the replay places it: whole GPUs of acceptable models, CPU and memory."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpu_binder.replay.trace import Pod

DemandKey = tuple[int, int, int, frozenset[str]]
"""An order's GPUs, CPU (milli), memory (MiB) and accepted models: what placement reads."""


@dataclass(frozen=True, slots=True)
class Order:
    """`gpus` whole GPUs on one node of a model in `models` (empty: any model).

    The node must also have `cpu_milli` and `memory_mib` free, so that the VM the
    binding is for can actually be scheduled there.
    """

    name: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    models: frozenset[str] = frozenset()
    created_s: int = 0
    deleted_s: int = 0

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"order {self.name} asks for {self.gpus} GPUs; an order needs one")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"order {self.name} asks for negative CPU or memory")

    def accepts(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def demand(self) -> DemandKey:
        """What placement depends on; orders with equal demands are interchangeable."""
        return (self.gpus, self.cpu_milli, self.memory_mib, self.models)


def orders_from_pods(pods: Iterable[Pod]) -> list[Order]:
    """The GPU orders of a pod list, in its order.

    Pods without GPUs are skipped: they are not VM orders (the binder never places
    them), and the trace's node list holds only the cluster's GPU nodes.
    """
    return [
        Order(
            name=pod.name,
            gpus=pod.gpus,
            cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib,
            models=pod.models,
            created_s=pod.created_s,
            deleted_s=pod.deleted_s,
        )
        for pod in pods
        if pod.gpus > 0
    ]
