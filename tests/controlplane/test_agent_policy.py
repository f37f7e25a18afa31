"""The agent's RBAC and admission policy on a real API server: each agent writes the
GPUDevices of its own node only, as the node in its pod-bound token says."""

from __future__ import annotations

import pytest
from nodeagent import (
    DEVICES,
    Agent,
    device,
    install_agent_rights,
    policy_enforced,
    wait_for_policy,
)

from gpu_binder.envtest import ControlPlane

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def agents(control_plane: ControlPlane) -> tuple[Agent, Agent]:
    install_agent_rights(control_plane)
    a, b = Agent(control_plane, "node-a"), Agent(control_plane, "node-b")
    wait_for_policy(lambda: policy_enforced(a))
    return a, b


def test_an_agent_creates_updates_and_deletes_its_own_nodes_devices(
    agents: tuple[Agent, Agent],
) -> None:
    a, _ = agents
    status, created = a.request("POST", DEVICES, device("node-a", "0000:2a:00.0"))
    assert status == 201, created
    created["spec"]["health"] = "Unhealthy"
    created["spec"]["healthMessage"] = "bound to the nvidia driver"
    status, updated = a.request("PUT", f"{DEVICES}/{created['metadata']['name']}", created)
    assert status == 200, updated
    status, body = a.request("DELETE", f"{DEVICES}/{created['metadata']['name']}")
    assert status == 200, body


def test_an_agent_cannot_write_another_nodes_devices(agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    status, body = a.request("POST", DEVICES, device("node-b", "0000:3a:00.0"))
    assert status == 422
    assert (
        "the agent on node node-a may only write GPUDevices of its own node, and "
        "node-b-0000-3a-00-0 is on node node-b" in body["message"]
    )
    status, theirs = b.request("POST", DEVICES, device("node-b", "0000:3a:00.0"))
    assert status == 201, theirs
    theirs["spec"]["model"] = "taken over"
    assert a.request("PUT", f"{DEVICES}/node-b-0000-3a-00-0", theirs)[0] == 422
    assert a.request("DELETE", f"{DEVICES}/node-b-0000-3a-00-0")[0] == 422


def test_an_agent_keeps_its_hands_off_unschedulable_and_finalizers(
    agents: tuple[Agent, Agent], control_plane: ControlPlane
) -> None:
    a, _ = agents
    status, body = a.request("POST", DEVICES, device("node-a", "0000:5d:00.0", unschedulable=True))
    assert status == 422 and "unschedulable is the admin's" in body["message"]
    status, mine = a.request("POST", DEVICES, device("node-a", "0000:5d:00.0"))
    assert status == 201, mine
    name = mine["metadata"]["name"]
    mine["spec"]["unschedulable"] = True
    status, body = a.request("PUT", f"{DEVICES}/{name}", mine)
    assert status == 422 and "unschedulable is the admin's" in body["message"]
    # The binder adds its finalizer; the agent may not take it off.
    held = control_plane.request("GET", f"{DEVICES}/{name}").json()
    held["metadata"]["finalizers"] = ["gpu.cozystack.io/device"]
    assert control_plane.request("PUT", f"{DEVICES}/{name}", held).status == 200
    held = control_plane.request("GET", f"{DEVICES}/{name}").json()
    held["metadata"]["finalizers"] = []
    status, body = a.request("PUT", f"{DEVICES}/{name}", held)
    assert status == 422 and "finalizers of a GPUDevice are the binder's" in body["message"]


def test_an_agent_names_devices_by_node_and_address(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    wrong = device("node-a", "0000:9a:00.0")
    wrong["metadata"]["name"] = "node-a-some-gpu"
    status, body = a.request("POST", DEVICES, wrong)
    assert status == 422 and "is named <node>-<pci address" in body["message"]
    mislabelled = device("node-a", "0000:9a:00.0")
    mislabelled["metadata"]["labels"]["gpu.cozystack.io/node"] = "node-b"
    status, body = a.request("POST", DEVICES, mislabelled)
    assert status == 422 and "label must name the agent's node" in body["message"]


def test_the_agent_has_no_rights_beyond_its_own(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    assert a.request("GET", "/apis/gpu.cozystack.io/v1alpha1/gpuclasses")[0] == 200
    status, mine = a.request("POST", DEVICES, device("node-a", "0000:ab:00.0"))
    assert status == 201
    mine["status"] = {"phase": "Available"}
    assert a.request("PUT", f"{DEVICES}/{mine['metadata']['name']}/status", mine)[0] == 403
    cls = {
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": "sneaky"},
        "spec": {"resourceName": "nvidia.com/sneaky"},
    }
    assert a.request("POST", "/apis/gpu.cozystack.io/v1alpha1/gpuclasses", cls)[0] == 403
    assert a.request("GET", "/api/v1/namespaces/gpu-binder/secrets")[0] == 403
