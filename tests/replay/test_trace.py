"""Loading the trace: typed records, whole GPUs, model sets, and errors that name file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_binder.replay.order import orders_from_pods
from gpu_binder.replay.trace import Node, TraceError, load_nodes, load_pods, parse_gpu_spec

from .make import NODE_HEADER, POD_HEADER, SHIPPED, write


def pods_file(tmp_path: Path, *rows: str) -> Path:
    return write(tmp_path / "pods.csv", POD_HEADER, *rows)


def test_nodes_load_with_resources_gpus_and_model(tmp_path: Path) -> None:
    path = write(tmp_path / "nodes.csv", NODE_HEADER, "n0,64000,262144,2,P100")
    assert load_nodes(path) == [Node("n0", 64_000, 262_144, 2, "P100")]


def test_pods_load_with_resources_gpus_and_times(tmp_path: Path) -> None:
    path = pods_file(tmp_path, "p0,12000,16384,2,1000,,LS,Running,10,20,11")
    (pod,) = load_pods(path)
    assert (pod.name, pod.cpu_milli, pod.memory_mib, pod.gpus) == ("p0", 12_000, 16_384, 2)
    assert (pod.created_s, pod.deleted_s, pod.scheduled_s) == (10, 20, 11)


def test_a_fractional_gpu_request_is_one_whole_gpu(tmp_path: Path) -> None:
    (pod,) = load_pods(pods_file(tmp_path, "p0,6000,12288,1,460,,LS,Running,0,5,0"))
    assert pod.gpus == 1
    assert pod.fractional


def test_gpu_spec_lists_the_acceptable_models() -> None:
    assert parse_gpu_spec("V100M16|V100M32|V100M32") == {"V100M16", "V100M32"}


def test_an_empty_gpu_spec_accepts_any_model(tmp_path: Path) -> None:
    (pod,) = load_pods(pods_file(tmp_path, "p0,1,1,1,1000,,LS,Running,0,5,0"))
    (order,) = orders_from_pods([pod])
    assert order.models == frozenset()
    assert order.accepts("T4")


def test_a_pod_never_scheduled_has_no_scheduled_time(tmp_path: Path) -> None:
    (pod,) = load_pods(pods_file(tmp_path, "p0,1,1,1,1000,,LS,Pending,0,5,"))
    assert pod.scheduled_s is None


def test_pods_without_gpus_are_not_orders(tmp_path: Path) -> None:
    pods = load_pods(
        pods_file(tmp_path, "cpu,1,1,0,0,,LS,Running,0,5,0", "gpu,1,1,1,1000,T4,LS,Running,0,5,0")
    )
    assert [order.name for order in orders_from_pods(pods)] == ["gpu"]


def test_a_field_that_is_not_a_number_names_file_line_and_column(tmp_path: Path) -> None:
    path = pods_file(tmp_path, "p0,1,1,1,1000,,LS,Running,0,5,0", "p1,lots,1,1,1000,,LS,R,0,5,0")
    with pytest.raises(TraceError, match=rf"^{path}:3: cpu_milli 'lots' is not an integer$"):
        load_pods(path)


def test_a_row_with_too_few_fields_is_an_error(tmp_path: Path) -> None:
    path = pods_file(tmp_path, "p0,1,1,1")
    with pytest.raises(TraceError, match=rf"^{path}:2: expected 11 fields, got 4$"):
        load_pods(path)


def test_a_row_with_too_many_fields_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "nodes.csv", NODE_HEADER, "n0,1,1,1,T4,extra")
    with pytest.raises(TraceError, match=rf"^{path}:2: expected 5 fields, got 6$"):
        load_nodes(path)


def test_a_missing_column_is_reported_on_the_header(tmp_path: Path) -> None:
    path = write(tmp_path / "nodes.csv", "sn,cpu_milli,gpu,model", "n0,1,1,T4")
    with pytest.raises(TraceError, match=rf"^{path}:1: header lacks column\(s\) memory_mib$"):
        load_nodes(path)


def test_a_negative_count_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "nodes.csv", NODE_HEADER, "n0,1,1,-2,T4")
    with pytest.raises(TraceError, match=rf"^{path}:2: gpu -2 is negative$"):
        load_nodes(path)


def test_a_node_with_gpus_but_no_model_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "nodes.csv", NODE_HEADER, "n0,1,1,2,")
    with pytest.raises(TraceError, match=rf"^{path}:2: node 'n0' has 2 GPUs but no model$"):
        load_nodes(path)


def test_a_node_defined_twice_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "nodes.csv", NODE_HEADER, "n0,1,1,1,T4", "n0,1,1,1,T4")
    with pytest.raises(TraceError, match=rf"^{path}:3: node 'n0' already defined on line 2$"):
        load_nodes(path)


def test_a_pod_deleted_before_it_was_created_is_an_error(tmp_path: Path) -> None:
    path = pods_file(tmp_path, "p0,1,1,1,1000,,LS,Running,9,5,0")
    with pytest.raises(TraceError, match=rf"^{path}:2: deletion_time 5 before creation_time 9$"):
        load_pods(path)


def test_more_than_one_gpu_in_gpu_milli_is_an_error(tmp_path: Path) -> None:
    path = pods_file(tmp_path, "p0,1,1,1,1500,,LS,Running,0,5,0")
    with pytest.raises(TraceError, match=rf"^{path}:2: gpu_milli 1500 is more than one GPU"):
        load_pods(path)


def test_a_share_of_a_gpu_without_a_gpu_count_is_an_error(tmp_path: Path) -> None:
    path = pods_file(tmp_path, "p0,1,1,0,500,,LS,Running,0,5,0")
    with pytest.raises(TraceError, match=rf"^{path}:2: gpu_milli 500 without num_gpu$"):
        load_pods(path)


def test_an_unreadable_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        load_nodes(tmp_path / "absent.csv")


def test_the_shipped_trace_loads_whole() -> None:
    nodes = load_nodes(SHIPPED / "openb_node_list_gpu_node.csv")
    pods = load_pods(SHIPPED / "openb_pod_list_gpuspec33.csv")
    assert (len(nodes), sum(n.gpus for n in nodes)) == (1213, 6212)
    assert len(pods) == 8152
    assert {"V100M16", "V100M32"} in [pod.models for pod in pods]
