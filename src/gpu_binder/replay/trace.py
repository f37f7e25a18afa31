"""Loading the Alibaba GPU cluster trace (v2023) into typed records.

Two CSV files make a trace: the node list (`sn,cpu_milli,memory_mib,gpu,model`) and a
pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...,creation_time,
deletion_time,scheduled_time`). Every malformed row is reported as `file:line: what`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
# Columns some variants of the trace leave out (the multigpu* lists): an absent gpu_spec
# accepts any model, absent times make every pod live at 0 (arrival mode needs none).
OPTIONAL_POD_COLUMNS = ("gpu_spec", "creation_time", "deletion_time")
WHOLE_GPU_MILLI = 1000


class TraceError(ValueError):
    """A trace file that cannot be read as the format says; the message names file:line."""


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU node of the trace: its allocatable CPU, memory and GPUs of one model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class Pod:
    """A task of the trace, with its GPU request already rounded to whole GPUs.

    `gpus` is `num_gpu` of the trace; a fractional request (`gpu_milli` < 1000, which
    the trace only pairs with `num_gpu` 1) counts as one whole GPU, since a VM cannot
    share a passed-through device. `models` is the set of acceptable GPU models
    (empty: any model).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_milli: int
    models: frozenset[str]
    created_s: int
    deleted_s: int
    scheduled_s: int | None

    @property
    def fractional(self) -> bool:
        """True when the trace asked for a share of one GPU, not whole GPUs."""
        return 0 < self.gpu_milli < WHOLE_GPU_MILLI


def parse_gpu_spec(text: str) -> frozenset[str]:
    """`V100M16|V100M32` → {V100M16, V100M32}; the empty spec accepts any model."""
    return frozenset(part.strip() for part in text.split("|") if part.strip())


def load_nodes(path: str | Path) -> list[Node]:
    """The node list in file order; duplicate names are an error."""
    nodes: list[Node] = []
    seen: dict[str, int] = {}
    for line, row in _rows(Path(path), NODE_COLUMNS):
        where = f"{path}:{line}"
        name = _text(row, "sn", where)
        if name in seen:
            raise TraceError(f"{where}: node {name!r} already defined on line {seen[name]}")
        seen[name] = line
        gpus = _count(row, "gpu", where)
        model = row["model"].strip()
        if gpus > 0 and not model:
            raise TraceError(f"{where}: node {name!r} has {gpus} GPUs but no model")
        nodes.append(
            Node(
                name=name,
                cpu_milli=_count(row, "cpu_milli", where),
                memory_mib=_count(row, "memory_mib", where),
                gpus=gpus,
                model=model,
            )
        )
    return nodes


def load_pods(path: str | Path) -> list[Pod]:
    """Every pod of the list in file order, GPU-less ones included (see `orders`)."""
    pods: list[Pod] = []
    for line, row in _rows(Path(path), POD_COLUMNS):
        where = f"{path}:{line}"
        name = _text(row, "name", where)
        num_gpu = _count(row, "num_gpu", where)
        gpu_milli = _count(row, "gpu_milli", where)
        if gpu_milli > WHOLE_GPU_MILLI:
            raise TraceError(f"{where}: gpu_milli {gpu_milli} is more than one GPU (1000)")
        if num_gpu == 0 and gpu_milli > 0:
            raise TraceError(f"{where}: gpu_milli {gpu_milli} without num_gpu")
        created = _count(row, "creation_time", where) if "creation_time" in row else 0
        deleted = _count(row, "deletion_time", where) if "deletion_time" in row else 0
        if deleted < created:
            raise TraceError(f"{where}: deletion_time {deleted} before creation_time {created}")
        scheduled = row.get("scheduled_time", "").strip()
        pods.append(
            Pod(
                name=name,
                cpu_milli=_count(row, "cpu_milli", where),
                memory_mib=_count(row, "memory_mib", where),
                gpus=num_gpu,
                gpu_milli=gpu_milli,
                models=parse_gpu_spec(row.get("gpu_spec", "")),
                created_s=created,
                deleted_s=deleted,
                scheduled_s=_count(row, "scheduled_time", where) if scheduled else None,
            )
        )
    return pods


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, Mapping[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as err:
        raise TraceError(f"{path}: cannot open: {err.strerror}") from err
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [column for column in columns if column not in header]
        if missing:
            raise TraceError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
        for row in reader:
            if None in row or any(value is None for value in row.values()):
                raise TraceError(
                    f"{path}:{reader.line_num}: expected {len(header)} fields, "
                    f"got {_field_count(row)}"
                )
            yield reader.line_num, row


def _field_count(row: Mapping[str | None, object]) -> int:
    extra = row.get(None)
    present = sum(1 for key, value in row.items() if key is not None and value is not None)
    return present + (len(extra) if isinstance(extra, list) else 0)


def _text(row: Mapping[str, str], column: str, where: str) -> str:
    value = row[column].strip()
    if not value:
        raise TraceError(f"{where}: {column} is empty")
    return value


def _count(row: Mapping[str, str], column: str, where: str) -> int:
    value = row[column].strip()
    try:
        number = int(value)
    except ValueError:
        raise TraceError(f"{where}: {column} {value!r} is not an integer") from None
    if number < 0:
        raise TraceError(f"{where}: {column} {number} is negative")
    return number
