"""`gpu-binder agent` on a real API server, as its own ServiceAccount with a token bound
to a pod on its node: the DaemonSet's identity, under its RBAC and admission policy.

Each test has its own node and a fixture sysfs tree of an HGX H100 board (8 GPUs behind
4 NVSwitches); its GPUDevices are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest
from nodeagent import (
    DEVICES,
    NAMESPACE,
    Agent,
    collection,
    install_agent_rights,
    manifests,
    policy_enforced,
    wait_for_policy,
)
from realcluster import eventually, uid

from gpu_binder.agent.command import main_agent
from gpu_binder.agent.sync import NODE_LABEL
from gpu_binder.api.types import GPUDevice, GPUDeviceStatus, Health, Phase, device_name
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient, connect

sys.path.append(str(Path(__file__).resolve().parents[1] / "agent"))
from fake_sysfs import H100_GPUS, HGX_H100, FakeHost, hgx_h100

pytestmark = pytest.mark.controlplane

H100_MODEL = "GH100 [H100 SXM5 80GB]"
APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True)
class AgentNode:
    name: str
    kubeconfig: Path
    host: FakeHost
    plugin_dir: Path

    def argv(self, *flags: str) -> list[str]:
        return [
            "--root",
            str(self.host.root),
            "--node",
            self.name,
            "--kubeconfig",
            str(self.kubeconfig),
            "--device-plugin-dir",
            str(self.plugin_dir),
            *flags,
        ]

    async def once(self) -> int:
        """`gpu-binder agent --once`: one pass (the command runs its own event loop)."""
        return await asyncio.to_thread(main_agent, self.argv("--once"))


@pytest.fixture(scope="module")
def agent_rights(control_plane: ControlPlane) -> ControlPlane:
    install_agent_rights(control_plane)
    probe = Agent(control_plane, f"probe-{uid()}")
    wait_for_policy(lambda: policy_enforced(probe))
    return control_plane


@pytest.fixture
def node(agent_rights: ControlPlane, tmp_path: Path) -> Iterator[AgentNode]:
    """A node with an HGX H100 board and the agent's identity on it."""
    cp = agent_rights
    agent = Agent(cp, f"n1-{uid()}")
    (tmp_path / "plugins").mkdir()
    yield AgentNode(
        agent.node,
        agent.kubeconfig(tmp_path / "agent.kubeconfig"),
        hgx_h100(tmp_path / "host"),
        tmp_path / "plugins",
    )
    selector = urlencode({"labelSelector": f"{NODE_LABEL}={agent.node}"})
    gone = cp.request("DELETE", f"{DEVICES}?{selector}")
    assert gone.ok, gone.body


@pytest.fixture
async def reader(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    """The cluster admin: what is stored, and the binder's status writes."""
    async with await connect(str(control_plane.kubeconfig)) as client:
        yield client


async def devices_of(reader: KubeClient, node: str) -> list[GPUDevice]:
    found = await reader.list(GPUDevice, label_selector=f"{NODE_LABEL}={node}")
    return sorted(found.items, key=lambda d: d.spec.pci_address)


async def test_a_pass_creates_one_gpudevice_per_gpu_of_the_node(
    node: AgentNode, reader: KubeClient
) -> None:
    assert await node.once() == 0
    devices = await devices_of(reader, node.name)
    assert [d.name for d in devices] == [device_name(node.name, a) for a in H100_GPUS]
    assert all(d.metadata.labels == {NODE_LABEL: node.name} for d in devices)
    specs = [d.spec for d in devices]
    assert [s.slot for s in specs] == list(range(8))
    assert [s.numa_node for s in specs] == [numa for *_, numa in HGX_H100]
    assert [s.iommu_group for s in specs] == [node.host.iommu_group(a) for a in H100_GPUS]
    assert {(s.node_name, s.vendor_id, s.device_id, s.model, s.driver) for s in specs} == {
        (node.name, "0x10de", "0x2330", H100_MODEL, "vfio-pci")
    }
    assert {s.nvlink_domain for s in specs} == {"nvswitch-0000-05-00-0"}
    assert {(s.health, s.health_message) for s in specs} == {(Health.HEALTHY, "")}


async def test_a_vanished_gpu_loses_its_gpudevice_and_nothing_else_is_written(
    node: AgentNode, reader: KubeClient
) -> None:
    assert await node.once() == 0
    before = {d.name: d.metadata.resource_version for d in await devices_of(reader, node.name)}
    node.host.remove(H100_GPUS[3])
    assert await node.once() == 0
    after = {d.name: d.metadata.resource_version for d in await devices_of(reader, node.name)}
    del before[device_name(node.name, H100_GPUS[3])]
    assert after == before


async def test_a_gpu_rebound_to_nvidia_turns_unhealthy_with_the_reason(
    node: AgentNode, reader: KubeClient
) -> None:
    assert await node.once() == 0
    node.host.bind(H100_GPUS[5], "nvidia")
    assert await node.once() == 0
    spec = {d.spec.pci_address: d.spec for d in await devices_of(reader, node.name)}
    assert spec[H100_GPUS[5]].health == Health.UNHEALTHY
    assert spec[H100_GPUS[5]].health_message == (
        "bound to the nvidia driver instead of vfio-pci, so the host owns it and it cannot "
        "be passed through to a VM"
    )
    assert spec[H100_GPUS[5]].driver == "nvidia"
    assert [a for a, s in spec.items() if s.health != Health.HEALTHY] == [H100_GPUS[5]]


async def clean(reader: KubeClient, node: str, address: str) -> datetime:
    """What the binder does when a VM lets the GPU go: phase Cleaning, releasedAt now."""
    released = datetime.now(UTC).replace(microsecond=0)
    d = await reader.get(GPUDevice, device_name(node, address))
    status = GPUDeviceStatus(phase=Phase.CLEANING, released_at=released)
    await reader.update_status(d.model_copy(update={"status": status}))
    return released


async def test_a_cleaning_gpu_is_reset_through_sysfs_and_gets_last_reset(
    node: AgentNode, reader: KubeClient
) -> None:
    assert await node.once() == 0
    released = await clean(reader, node.name, H100_GPUS[2])
    assert await node.once() == 0
    assert (node.host.path(H100_GPUS[2]) / "reset").read_text() == "1"
    assert [a for a in H100_GPUS if (node.host.path(a) / "reset").read_text()] == [H100_GPUS[2]]
    d = await reader.get(GPUDevice, device_name(node.name, H100_GPUS[2]))
    assert d.spec.last_reset is not None and d.spec.last_reset >= released
    assert (d.spec.health, d.status.phase) == (Health.HEALTHY, Phase.CLEANING)


async def test_a_cleaning_gpu_that_cannot_be_reset_turns_unhealthy(
    node: AgentNode, reader: KubeClient
) -> None:
    assert await node.once() == 0
    (node.host.path(H100_GPUS[0]) / "reset").unlink()
    await clean(reader, node.name, H100_GPUS[0])
    assert await node.once() == 0
    d = await reader.get(GPUDevice, device_name(node.name, H100_GPUS[0]))
    assert (d.spec.health, d.spec.last_reset) == (Health.UNHEALTHY, None)
    assert d.spec.health_message == (
        "function-level reset failed: the device offers no reset method (sysfs has no reset "
        "file); it stays out of use until a reset succeeds"
    )


async def test_the_running_agent_rescans_on_sighup_and_stops_on_sigterm(
    node: AgentNode, reader: KubeClient, tmp_path: Path
) -> None:
    argv = [sys.executable, "-m", "gpu_binder.cli.main", "agent", *node.argv("--interval=1h")]
    log = tmp_path / "agent.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(argv, stderr=stderr)
    try:

        async def count(n: int) -> bool:
            assert proc.poll() is None, log.read_text()
            return len(await devices_of(reader, node.name)) == n

        await eventually(lambda: count(8), timeout=20, what="the first pass")
        node.host.add_function("0000:e1:00.0", upstream=["0000:e0:01.0"])
        proc.send_signal(signal.SIGHUP)
        await eventually(lambda: count(9), timeout=10, what="a rescan on SIGHUP")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 10) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- the manifests of deploy/agent ----------------------------------------------------


def test_every_agent_manifest_is_accepted_by_the_api_server(agent_rights: ControlPlane) -> None:
    """`kubectl apply --server-side --dry-run=server -f deploy/agent/`."""
    cp = agent_rights
    for doc in manifests():
        name = doc["metadata"]["name"]
        query = "dryRun=All&fieldManager=kubectl&force=true"
        answer = cp.request("PATCH", f"{collection(doc)}/{name}?{query}", doc, content_type=APPLY)
        assert answer.ok, f"{doc['kind']} {name}: {answer.body!r}"


def test_the_daemonsets_pod_is_admitted(agent_rights: ControlPlane) -> None:
    """The pod the DaemonSet controller would create on a node (priority class, account)."""
    (ds,) = [d for d in manifests("daemonset.yaml") if d["kind"] == "DaemonSet"]
    template = ds["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": f"gpu-binder-agent-{uid()}"},
        "spec": {**template["spec"], "nodeName": f"n-{uid()}"},
    }
    answer = agent_rights.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All", pod)
    assert answer.ok, answer.body
