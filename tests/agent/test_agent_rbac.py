"""The agent's ClusterRole (deploy/agent/rbac.yaml) grants the verbs the agent uses, no more."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import yaml
from fake_sysfs import H100_GPUS, hgx_h100
from recording import Recording

from gpu_binder.agent.runner import AgentConfig, NodeAgent
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUDevice, GPUDeviceSpec, device_name

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "agent" / "rbac.yaml"


def granted() -> set[tuple[str, str]]:
    (role,) = [d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole"]
    return {
        (verb, resource)
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


async def test_the_cluster_role_grants_exactly_what_every_path_of_the_agent_uses(
    tmp_path: Path,
) -> None:
    host = hgx_h100(tmp_path)
    client = Recording()
    # An unlabelled object of the node's first GPU, to be adopted (get, then update).
    spec = GPUDeviceSpec(node_name="n1", pci_address=H100_GPUS[0], device_id="0x2330")
    client.put(GPUDevice(metadata=ObjectMeta(name=device_name("n1", H100_GPUS[0])), spec=spec))
    agent = NodeAgent(AgentConfig(node="n1", root=tmp_path), client)
    await agent.run_pass()  # list, create, adopt
    # The running agent: watches, and passes on them (update, delete).
    stop = asyncio.Event()
    running = asyncio.create_task(agent.run(stop))

    async def until(done: Callable[[], bool]) -> None:
        while not done():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(until(lambda: agent.devices is not None and agent.devices.live), 5)
    host.bind(H100_GPUS[1], "nvidia")
    host.remove(H100_GPUS[2])
    agent.wake.set()
    await asyncio.wait_for(until(lambda: len(client.objects(GPUDevice)) == 7), 5)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert client.requests == granted()
