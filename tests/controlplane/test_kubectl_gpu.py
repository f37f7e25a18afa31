"""`kubectl gpu` against a real API server, with a kubeconfig as a person would use it:
the binder runs and writes its Events, the plugin reads them back (by field selector),
and `kubectl` itself finds the plugin on PATH."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from realcluster import Fleet, eventually, namespace, run_vmi, vmi_of

from conftest import Binders, StartBinder
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient
from gpu_binder.kubectl.command import run

pytestmark = pytest.mark.controlplane


async def kubectl_gpu(kubeconfig: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await run(["--kubeconfig", str(kubeconfig), *argv], out, err, colour=False)
    return code, out.getvalue(), err.getvalue()


async def bound(fleet: Fleet, ns: str, vm: str, n: int) -> bool:
    return len(await fleet.set_of(ns, vm)) == n


async def test_status_shows_the_class_and_its_nodes_slots(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    node_a = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    await fleet.create_vm(ns, "vm", gpus=2, running=False)
    await eventually(lambda: bound(fleet, ns, "vm", 2), what="bound")

    async def counted() -> dict[str, Any] | None:
        code, out, err = await kubectl_gpu(control_plane.kubeconfig, "status", "-o", "json")
        assert code == 0, err
        found = json.loads(out)
        mine = [c for c in found["classes"] if c["name"] == fleet.class_name]
        return found if mine and mine[0]["bound"] == 2 else None

    found = await eventually(counted, what="the class status counted")
    (mine,) = [c for c in found["classes"] if c["name"] == fleet.class_name]
    assert (mine["devices"], mine["available"], mine["largestFreeSet"]) == (4, 2, 2)
    (node,) = [n for n in found["nodes"] if n["name"] == node_a]
    assert [s["phase"] for s in node["slots"]] == ["Bound", "Bound", "Available", "Available"]
    _, out, _ = await kubectl_gpu(control_plane.kubeconfig, "status")
    (row,) = [line.split() for line in out.splitlines() if line.startswith(node_a)]
    assert row[:3] == [node_a, "Ready", "bb.."] and f"{ns}/vm" in row[3]


async def test_vm_shows_its_set_and_the_binders_events_newest_last(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node_a = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    vm = await fleet.create_vm(ns, "vm", gpus=2)
    await eventually(lambda: bound(fleet, ns, "vm", 2), what="bound")
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(2)))
    await run_vmi(admin, vmi, node_a)

    async def attached() -> dict[str, Any] | None:
        code, out, err = await kubectl_gpu(control_plane.kubeconfig, "vm", f"{ns}/vm", "-o", "json")
        assert code == 0, err
        data: dict[str, Any] = json.loads(out)
        return data if {d["phase"] for d in data["devices"]} == {"Attached"} else None

    data = await eventually(attached, what="attached")
    assert data["node"] == node_a and data["order"] == {fleet.class_name: 2}
    assert data["vmi"]["phase"] == "Running"
    assert [e["reason"] for e in data["events"]][:1] == ["GPUOrder"]
    _, out, _ = await kubectl_gpu(control_plane.kubeconfig, "-n", ns, "vm", "vm")
    assert f"Set      2 GPU(s) on {node_a}" in out
    assert "GPUOrder" in out.split("History (Events, newest last):")[1]


async def test_why_says_an_order_waits_for_a_node_with_enough_free_gpus(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    await fleet.create_vm(ns, "big", gpus=4)

    async def explained() -> str | None:
        code, out, err = await kubectl_gpu(control_plane.kubeconfig, "why", f"{ns}/big")
        assert code == 0, err
        return out if "GPUUnplaceable" in out else None

    said = await eventually(explained, what="the refusal in the Events")
    assert f"{ns}/big is running (runStrategy Always) and orders 4 × {fleet.class_name}." in said
    assert "It holds none." in said
    assert "the largest free set is 2" in said


async def test_drain_says_where_stopped_sets_go_and_which_vmis_block(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node_a = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    await fleet.create_vm(ns, "idle", gpus=1, running=False)
    running = await fleet.create_vm(ns, "busy", gpus=1)
    await eventually(lambda: bound(fleet, ns, "idle", 1), what="idle bound")
    await eventually(lambda: bound(fleet, ns, "busy", 1), what="busy bound")
    vmi = vmi_of(running, ns, "busy", fleet.gpus(1))
    raw = vmi.to_dict()
    raw["spec"]["evictionStrategy"] = "LiveMigrate"
    created = await admin.create(type(vmi).from_dict(raw))
    await run_vmi(admin, created, node_a)
    node_b = await fleet.create_node("b")

    code, out, err = await kubectl_gpu(control_plane.kubeconfig, "drain", node_a, "-o", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["stoppedSets"] == [{"vm": f"{ns}/idle", "gpus": 1, "to": node_b, "why": None}]
    (busy,) = plan["runningVMIs"]
    assert busy["vmi"] == f"{ns}/busy" and busy["blocksDrain"]
    assert busy["evictionStrategy"] == "LiveMigrate"
    assert plan["blocked"]
    assert [d.spec.node_name for d in await fleet.set_of(ns, "idle")] == [node_a], "no write"


async def test_check_passes_while_the_webhook_answers_and_fails_while_it_does_not(
    control_plane: ControlPlane, admin: KubeClient, start_binder: Binders
) -> None:
    ns = namespace(control_plane)
    binder = await start_binder()
    code, out, err = await kubectl_gpu(control_plane.kubeconfig, "check", "-n", ns)
    assert code == 0, out + err
    assert out.splitlines()[-1].startswith("ok   the webhook answers")

    await start_binder.stop(binder)

    code, out, _ = await kubectl_gpu(control_plane.kubeconfig, "check", "-n", ns)
    assert code == 1
    assert "FAIL the API server cannot reach the webhook" in out


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
async def test_kubectl_finds_the_plugin_on_path(control_plane: ControlPlane) -> None:
    bindir = Path(sys.executable).parent
    assert (bindir / "kubectl-gpu").exists(), "pip install puts kubectl-gpu beside python"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["kubectl", "gpu", "--kubeconfig", str(control_plane.kubeconfig), "status", "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "classes" in json.loads(done.stdout)
