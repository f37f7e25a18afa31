"""`gpu-binder sim --trace`: an Alibaba-format trace played on the embedded cluster."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import CLASSES_ANNOTATION, GPUClass, GPUUsageRecord
from gpu_binder.binder.ledger import of_ledger
from gpu_binder.cli.main import main
from gpu_binder.replay.order import orders_from_pods
from gpu_binder.replay.trace import load_nodes, load_pods
from gpu_binder.sim.command import main_sim_cli, run_trace
from gpu_binder.sim.trace import CREATE, UNTIMED_SPACING_S, build_trace

# The trace's headers (as tests/replay/make.py writes them).
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
NODES = (
    "node-a0,64000,262144,4,V100M16",
    "node-a1,64000,262144,4,V100M16",
    "node-b0,32000,131072,2,T4",
)


def write(path: Path, header: str, *rows: str) -> Path:
    path.write_text("\n".join((header, *rows)) + "\n", encoding="utf-8")
    return path


def pod(i: int, gpus: int, created: int, deleted: int, spec: str = "", cpu: int = 8000) -> str:
    milli = 1000 if gpus else 0
    return f"pod-{i:03d},{cpu},16384,{gpus},{milli},{spec},LS,Running,{created},{deleted},{created}"


def load(tmp_path: Path, *pods: str) -> tuple[Path, Path]:
    return write(tmp_path / "nodes.csv", NODE_HEADER, *NODES), write(
        tmp_path / "pods.csv", POD_HEADER, *pods
    )


async def test_trace_run_builds_the_cluster_and_places_its_vms(tmp_path: Path) -> None:
    nodes_csv, pods_csv = load(
        tmp_path,
        pod(0, 4, 0, 3600),
        pod(1, 2, 60, 7200, "T4"),
        pod(2, 1, 120, 1800, "V100M16"),
        pod(3, 0, 130, 1900),  # no GPU: not a VM
    )
    nodes, orders = load_nodes(nodes_csv), orders_from_pods(load_pods(pods_csv))
    c, _ = await build_trace(nodes, orders, seed=1)
    classes = {cls.metadata.name: cls.spec for cls in c.client.objects(GPUClass)}
    assert {name: spec.resource_name for name, spec in classes.items()} == {
        "t4": "nvidia.com/T4",
        "v100m16": "nvidia.com/V100M16",
    }
    assert {spec.pinning for spec in classes.values()} == {"Device"}
    assert {spec.placement.policy for spec in classes.values()} == {"LeastStranded"}
    kube_nodes = {n.name: n for n in c.client.objects(Node)}
    assert sorted(kube_nodes) == ["node-a0", "node-a1", "node-b0"]
    assert (kube_nodes["node-b0"].cpu_milli, kube_nodes["node-b0"].memory_bytes) == (
        32000,
        131072 * 2**20,
    )

    figures = await run_trace(nodes, orders, seed=1, chaos=False)

    assert figures["violations"] == []
    assert (figures["nodes"], figures["classes"], figures["devices"]) == (3, 2, 10)
    assert (figures["pods"], figures["orders_placed"], figures["orders_refused"]) == (3, 3, 0)
    assert figures["vmis_running"] == 3
    # 4 GPUs × 1 h + 2 × 7140 s + 1 × 1680 s, every one billed.
    assert figures["gpu_hours_ordered"] == figures["gpu_hours_billed"] == 8.43


async def test_pod_vm_lives_from_its_creation_to_its_deletion_time(tmp_path: Path) -> None:
    nodes_csv, pods_csv = load(tmp_path, pod(0, 2, 500, 4100))
    c, w = await build_trace(load_nodes(nodes_csv), orders_from_pods(load_pods(pods_csv)), 1)
    start = c.t0 + timedelta(seconds=w.origin)

    assert (await w.step(c)).kind == CREATE
    vm = c.client.peek(VirtualMachine, "vm-000000", "trace")
    assert vm is not None
    assert vm.metadata.creation_timestamp == start + timedelta(seconds=500)
    vmi = c.client.peek(VirtualMachineInstance, "vm-000000", "trace")
    assert vmi is not None and vmi.live
    assert len(c.world.devices.set_of("trace/vm-000000")) == 2

    await w.step(c)
    assert w.done
    assert c.clock() == start + timedelta(seconds=4100)
    assert c.client.peek(VirtualMachine, "vm-000000", "trace") is None
    records = of_ledger(c.client.objects(GPUUsageRecord))
    assert len(records) == 2
    assert {(r.spec.start, r.spec.end) for r in records} == {
        (start + timedelta(seconds=500), start + timedelta(seconds=4100))
    }


async def test_time_scale_compresses_trace_time(tmp_path: Path) -> None:
    nodes_csv, pods_csv = load(tmp_path, pod(0, 1, 1000, 5000))
    _, w = await build_trace(
        load_nodes(nodes_csv), orders_from_pods(load_pods(pods_csv)), 1, time_scale=10
    )
    assert [e.at_s for e in w.events] == [100, 500]


async def test_pods_without_times_come_in_file_order_and_stay(tmp_path: Path) -> None:
    untimed = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"
    pods_csv = write(tmp_path / "pods.csv", untimed, "p0,1000,1024,1,1000", "p1,1000,1024,1,500")
    nodes_csv = write(tmp_path / "nodes.csv", NODE_HEADER, *NODES)
    _, w = await build_trace(load_nodes(nodes_csv), orders_from_pods(load_pods(pods_csv)), 1)
    assert [(e.at_s, e.kind) for e in w.events] == [(0, CREATE), (UNTIMED_SPACING_S, CREATE)]


async def test_pod_accepting_several_models_orders_every_class(tmp_path: Path) -> None:
    nodes_csv, pods_csv = load(tmp_path, pod(0, 1, 0, 60, "T4|V100M16|A100"))
    c, w = await build_trace(load_nodes(nodes_csv), orders_from_pods(load_pods(pods_csv)), 1)
    await w.step(c)
    vm = c.client.peek(VirtualMachine, "vm-000000", "trace")
    assert vm is not None
    assert vm.metadata.annotations[CLASSES_ANNOTATION] == "t4,v100m16"


async def test_pod_asking_more_cpu_than_any_node_has_is_refused(tmp_path: Path) -> None:
    nodes_csv, pods_csv = load(tmp_path, pod(0, 1, 0, 60, cpu=96000), pod(1, 1, 0, 60))
    nodes, orders = load_nodes(nodes_csv), orders_from_pods(load_pods(pods_csv))

    figures = await run_trace(nodes, orders, seed=1, chaos=False)

    assert (figures["orders_placed"], figures["orders_refused"]) == (1, 1)
    assert figures["violations"] == []


@pytest.mark.parametrize("seed", [1, 2])
async def test_chaos_on_a_trace_holds_every_invariant(tmp_path: Path, seed: int) -> None:
    rows = [pod(i, 1 + i % 4 // 2, i * 90, i * 90 + 600 + (i * 397) % 5000) for i in range(80)]
    nodes_csv, pods_csv = load(tmp_path, *rows)
    nodes, orders = load_nodes(nodes_csv), orders_from_pods(load_pods(pods_csv))

    figures = await run_trace(nodes, orders, seed=seed, chaos=True)

    assert figures["faults"] > 0
    assert figures["events"] == 160
    assert figures["violations"] == []


def test_malformed_csv_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes_csv = write(tmp_path / "nodes.csv", NODE_HEADER, "node-a0,64000,lots,4,V100M16")
    pods_csv = write(tmp_path / "pods.csv", POD_HEADER, pod(0, 1, 0, 60))

    code = main_sim_cli(["--trace", str(nodes_csv), str(pods_csv), "--json"])

    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err == f"gpu-binder sim: {nodes_csv}:2: memory_mib 'lots' is not an integer\n"


def test_missing_csv_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods_csv = write(tmp_path / "pods.csv", POD_HEADER, pod(0, 1, 0, 60))

    code = main_sim_cli(["--trace", str(tmp_path / "none.csv"), str(pods_csv)])

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("gpu-binder sim: ") and err.count("\n") == 1


def test_the_command_line_plays_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv, pods_csv = load(tmp_path, pod(0, 1, 0, 60))

    code = main(["sim", "--trace", str(nodes_csv), str(pods_csv), "--json"])

    figures = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (figures["orders_placed"], figures["violations"]) == (1, [])
