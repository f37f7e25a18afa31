"""Small builders for replay tests: nodes, orders and trace files written on the fly."""

from __future__ import annotations

from pathlib import Path

from gpu_binder.replay.order import Order
from gpu_binder.replay.trace import Node

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
SHIPPED = Path(__file__).resolve().parents[2] / "data" / "alibaba-gpu-v2023"


def node(name: str, gpus: int = 8, model: str = "A", cpu: int = 64_000, mem: int = 256_000) -> Node:
    return Node(name=name, cpu_milli=cpu, memory_mib=mem, gpus=gpus, model=model)


def order(
    gpus: int = 1,
    cpu: int = 1_000,
    mem: int = 1_000,
    models: frozenset[str] = frozenset(),
    name: str = "vm",
    created: int = 0,
    deleted: int = 0,
) -> Order:
    return Order(
        name=name,
        gpus=gpus,
        cpu_milli=cpu,
        memory_mib=mem,
        models=models,
        created_s=created,
        deleted_s=deleted,
    )


def write(path: Path, header: str, *rows: str) -> Path:
    path.write_text("\n".join((header, *rows)) + "\n", encoding="utf-8")
    return path
