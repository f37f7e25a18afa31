"""A compromised node agent (its pod-bound token) reads only its own node's GPUDevices
(issue 11), on a real API server authorizing as deploy/apiserver/authorization-config.yaml
says (conftest starts it so).

RBAC grants the agent list/watch/get on every GPUDevice: RBAC cannot say "this node's",
and a list by label is a cluster-wide list permission. The API server's authorization
webhook sees the request's label selector and the node in the token, and its
matchConditions send the agent's reads beyond its node to the binder's /authorize, which
denies them (and with no binder answering, failurePolicy Deny refuses them as well). Its
own reads, the agent's only ones, never reach the webhook. Before, an agent listed every
GPUDevice of the cluster, other tenants' bindings included.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from nodeagent import DEVICES, Agent, device, install, install_agent_rights
from realcluster import uid

from conftest import StartBinder
from gpu_binder.envtest import ControlPlane

pytestmark = pytest.mark.controlplane

NODE_LABEL = "gpu.cozystack.io/node"


def selected(node: str) -> str:
    return DEVICES + "?" + urllib.parse.urlencode({"labelSelector": f"{NODE_LABEL}={node}"})


@pytest.fixture(scope="module")
def agents(control_plane: ControlPlane) -> tuple[Agent, Agent]:
    cp = control_plane
    install_agent_rights(cp)
    a, b = Agent(cp, f"ra-{uid()}"), Agent(cp, f"rb-{uid()}")
    for agent in (a, b):
        answer = cp.request("POST", DEVICES, device(agent.node))
        assert answer.status == 201, answer.body
    return a, b


def names(body: dict[str, Any]) -> list[str]:
    return [d["metadata"]["name"] for d in body.get("items", [])]


def read(agent: Agent, path: str) -> tuple[int, str]:
    """A GET as the agent: the status and the body as text (a refusal while no binder
    answers the authorization webhook is the API server's plain-text 500)."""
    req = urllib.request.Request(agent.cp.url + path, method="GET")
    req.add_header("Authorization", f"Bearer {agent.token}")
    try:
        with urllib.request.urlopen(req, context=agent.ssl, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def refused(answer: tuple[int, str]) -> bool:
    """Refused, nothing listed: 403 with the binder's reason, or 500 when the webhook is
    unreachable (failurePolicy Deny: the API server refuses, it never falls back to RBAC)."""
    status, text = answer
    return status in (403, 500) and '"items"' not in text


def test_an_agent_lists_and_gets_its_own_nodes_devices(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    status, body = a.request("GET", selected(a.node))
    assert status == 200, body
    assert names(body) == [device(a.node)["metadata"]["name"]]
    status, body = a.request("GET", f"{DEVICES}/{device(a.node)['metadata']['name']}")
    assert status == 200, body


def test_an_agent_cannot_list_every_device(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    assert refused(read(a, DEVICES))


def test_an_agent_cannot_list_another_nodes_devices(agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    assert refused(read(a, selected(b.node)))
    # Nor by a selector that takes its own node and more.
    both = urllib.parse.urlencode({"labelSelector": f"{NODE_LABEL} in ({a.node},{b.node})"})
    assert refused(read(a, f"{DEVICES}?{both}"))


def test_an_agent_cannot_get_another_nodes_device(agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    assert refused(read(a, f"{DEVICES}/{device(b.node)['metadata']['name']}"))
    # A name that starts like its own node's but is another node's ("ra-x" vs "ra-x-y").
    longer = device(f"{a.node}-y")["metadata"]["name"]
    assert refused(read(a, f"{DEVICES}/{longer}"))


def test_an_agent_cannot_watch_every_device(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    assert refused(read(a, f"{DEVICES}?watch=1&timeoutSeconds=1"))


def test_an_agent_still_reads_the_classes(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    status, body = a.request("GET", "/apis/gpu.cozystack.io/v1alpha1/gpuclasses")
    assert status == 200, body


async def test_with_the_binder_answering_the_refusal_says_why(
    agents: tuple[Agent, Agent], start_binder: StartBinder
) -> None:
    a, _ = agents
    await start_binder()
    # In a thread: the binder answers on this test's event loop.
    status, text = await asyncio.to_thread(read, a, DEVICES)
    assert status == 403, text
    assert f"the node agent of {a.node} may read only that node's GPUDevices" in text


def test_an_agents_requests_go_to_its_own_priority_level(
    control_plane: ControlPlane, agents: tuple[Agent, Agent]
) -> None:
    # API Priority and Fairness: a flood by one agent queues in the agents' level, shuffle-
    # sharded by user, and takes no seat of the binder's, the kubelets' or the tenants'.
    cp = control_plane
    install(cp, "flowcontrol.yaml")
    schema = cp.request("GET", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/gpu-binder-agent")
    uid_ = schema.json()["metadata"]["uid"]
    a, _ = agents

    def classified() -> bool:
        req = urllib.request.Request(cp.url + selected(a.node), method="GET")
        req.add_header("Authorization", f"Bearer {a.token}")
        with urllib.request.urlopen(req, context=a.ssl, timeout=30) as resp:
            return resp.headers.get("X-Kubernetes-PF-FlowSchema-UID") == uid_

    deadline = time.monotonic() + 30
    while not classified():
        assert time.monotonic() < deadline, "the agent's requests never reached its FlowSchema"
        time.sleep(0.1)
