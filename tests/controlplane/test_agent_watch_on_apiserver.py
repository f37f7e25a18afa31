"""The running `gpu-binder agent` watches its node's GPUDevices on a real API server.

As its own ServiceAccount with a token bound to a pod on its node (deploy/agent's RBAC
and admission policy), with rescans an hour apart: a GPU the binder puts in Cleaning is
reset within seconds, through the label-selected watch alone.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest
from nodeagent import DEVICES, Agent, install_agent_rights, policy_enforced, wait_for_policy
from realcluster import eventually, uid

from gpu_binder.agent.sync import NODE_LABEL
from gpu_binder.api.types import GPUDevice, GPUDeviceStatus, Phase, device_name
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient, connect

sys.path.append(str(Path(__file__).resolve().parents[1] / "agent"))
from fake_sysfs import H100_GPUS, FakeHost, hgx_h100

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def agent_rights(control_plane: ControlPlane) -> ControlPlane:
    install_agent_rights(control_plane)
    wait_for_policy(lambda: policy_enforced(Agent(control_plane, f"probe-{uid()}")))
    return control_plane


@pytest.fixture
def node(agent_rights: ControlPlane) -> Iterator[Agent]:
    agent = Agent(agent_rights, f"w-{uid()}")
    yield agent
    selector = urlencode({"labelSelector": f"{NODE_LABEL}={agent.node}"})
    gone = agent_rights.request("DELETE", f"{DEVICES}?{selector}")
    assert gone.ok, gone.body


@pytest.fixture
async def reader(agent_rights: ControlPlane) -> AsyncIterator[KubeClient]:
    async with await connect(str(agent_rights.kubeconfig)) as client:
        yield client


async def test_a_gpu_put_in_cleaning_is_reset_at_once_through_the_watch(
    node: Agent, reader: KubeClient, tmp_path: Path
) -> None:
    host: FakeHost = hgx_h100(tmp_path / "host")
    kubeconfig = node.kubeconfig(tmp_path / "agent.kubeconfig")
    argv = [
        sys.executable,
        "-m",
        "gpu_binder.cli.main",
        "agent",
        f"--root={host.root}",
        f"--node={node.node}",
        f"--kubeconfig={kubeconfig}",
        "--no-device-plugin",
        "--interval=1h",
        "--log-level=DEBUG",
    ]
    log = tmp_path / "agent.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(argv, stderr=stderr)
    try:

        async def all_eight() -> bool:
            assert proc.poll() is None, log.read_text()
            found = await reader.list(GPUDevice, label_selector=f"{NODE_LABEL}={node.node}")
            return len(found.items) == 8

        await eventually(all_eight, timeout=30, what="the first pass")
        # The watch is established once the agent has listed through it; give it a moment
        # past the first pass, far below the hour between rescans.
        await asyncio.sleep(1)
        name = device_name(node.node, H100_GPUS[4])
        d = await reader.get(GPUDevice, name)
        released = datetime.now(UTC).replace(microsecond=0)
        status = GPUDeviceStatus(phase=Phase.CLEANING, released_at=released)
        await reader.update_status(d.model_copy(update={"status": status}))

        async def reset() -> GPUDevice | None:
            assert proc.poll() is None, log.read_text()
            d = await reader.get(GPUDevice, name)
            return d if d.spec.last_reset is not None else None

        done = await eventually(reset, timeout=10, what="the reset of the Cleaning GPU")
        assert done.spec.last_reset is not None and done.spec.last_reset >= released
        assert [a for a in H100_GPUS if (host.path(a) / "reset").read_text()] == [H100_GPUS[4]]
        proc.terminate()
        assert await asyncio.to_thread(proc.wait, 10) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Both watches held: the agent never fell back to listing at each pass.
    assert "listing each pass meanwhile" not in log.read_text(), log.read_text()
