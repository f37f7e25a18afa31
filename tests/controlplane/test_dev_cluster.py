"""`make dev-cluster`: a person gets a kubeconfig, simulated GPUs and a running binder whose
webhooks pin a VMI and KubeVirt's pod of it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from gpu_binder.api.types import GPUDevice, Phase
from gpu_binder.devcluster import fleet
from gpu_binder.envtest import ControlPlane, free_port
from gpu_binder.kube import KubeClient, connect
from gpu_binder.sim.launcher import render_launcher_pod

pytestmark = pytest.mark.controlplane


async def test_the_dev_cluster_prints_a_kubeconfig_with_gpus_the_binder_keeps(
    control_plane: ControlPlane,  # the binaries are there (built, or skipped without them)
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpu_binder.devcluster",
            "--nodes=1",
            "--gpus-per-node=2",
            f"--metrics-port={free_port()}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        kubeconfig = await asyncio.wait_for(asyncio.to_thread(_kubeconfig, proc.stdout), 60)
        async with await connect(kubeconfig) as client:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                devices = (await client.list(GPUDevice)).items
                if len(devices) == 2 and all(d.status.phase == Phase.AVAILABLE for d in devices):
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"devices not classified: {devices}")
            await _a_launcher_pod_is_pinned(client)
        proc.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kubeconfig(out: object) -> str:
    for line in out:  # type: ignore[attr-defined]
        if line.startswith("kubeconfig: "):
            return str(line.split(" ", 1)[1].strip())
    raise AssertionError("the dev cluster printed no kubeconfig")


async def _a_launcher_pod_is_pinned(client: KubeClient) -> None:
    """A VM's VMI goes through the VMI webhook, its launcher pod (without the VMI's
    affinity, as KubeVirt's LiveUpdate sync leaves it) through the pod webhook."""
    vm = await client.create(fleet.vm("demo", "vm-1", 1))
    deadline = time.monotonic() + 20
    while not [d for d in (await client.list(GPUDevice)).items if d.status.binding is not None]:
        assert time.monotonic() < deadline, "the VM got no GPU"
        await asyncio.sleep(0.2)
    vmi = await client.create(fleet.vmi(vm, "demo", "vm-1", 1))
    (bound,) = [d for d in (await client.list(GPUDevice)).items if d.status.binding is not None]
    raw = {**vmi.raw, "spec": {k: v for k, v in vmi.raw["spec"].items() if k != "affinity"}}
    pod = await client.request("POST", "/api/v1/namespaces/demo/pods", render_launcher_pod(raw))
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    node = bound.spec.node_name
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    assert [t["matchFields"] for t in terms] == [[pin]]
