"""`make dev-cluster`: a person gets a kubeconfig, simulated GPUs and a running binder."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from gpu_binder.api.types import GPUDevice, Phase
from gpu_binder.envtest import ControlPlane, free_port
from gpu_binder.kube import connect

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
