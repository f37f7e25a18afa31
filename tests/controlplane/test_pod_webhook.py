"""The pod webhook on a real API server, called over TLS: KubeVirt's pods of a VMI are pinned
to its set's node even once the VMI lost its affinity, a pod naming a slot that is not its
set's is refused, and with gpu-binder down only objects that carry GPUs are refused.

The pods are rendered from the stored VMI as KubeVirt renders them (sim.launcher follows
template.go renderLaunchManifest) and created with a token of KubeVirt's virt-controller
ServiceAccount, as in a cluster (the slot resource policy admits only its pods holding
slots, when another test of the session installed it). No KubeVirt runs here: what its
LiveUpdate sync does to the VMI (vm.go VMIAffinityPatch) is done by the test.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from realcluster import Fleet, eventually, namespace, vmi_of
from test_slot_resource_policy import CONTROLLER, KUBEVIRT, Client, account_token, grant_pods

from conftest import StartBinder
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient
from gpu_binder.sim import builders
from gpu_binder.sim.launcher import render_launcher_pod

pytestmark = pytest.mark.controlplane

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# KubeVirt's own requirement in every required term of a host-model VMI's pods.
HOST_MODEL = {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}
POD_WEBHOOK = "pod.gpu-binder.cozystack.io"
VMI_WEBHOOK = "vmi.gpu-binder.cozystack.io"


class Tenant:
    """A test's namespace, and virt-controller's right to create pods in it."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.ns = namespace(cp)
        grant_pods(
            cp, self.ns, {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": KUBEVIRT}
        )
        self.controller = Client(cp, token=account_token(cp, KUBEVIRT, CONTROLLER))

    async def create_pod(self, pod: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Create pod as virt-controller does; off the loop, which serves the webhook."""
        path = f"/api/v1/namespaces/{self.ns}/pods"
        return await asyncio.to_thread(self.controller.request, "POST", path, pod)

    async def create_vmi(self, vmi: VirtualMachineInstance) -> tuple[int, dict[str, Any]]:
        path = f"/apis/kubevirt.io/v1/namespaces/{self.ns}/virtualmachineinstances"
        answer = await asyncio.to_thread(self.cp.request, "POST", path, vmi.to_dict())
        return answer.status, answer.json()


async def pinned_vmi(
    admin: KubeClient, fleet: Fleet, tenant: Tenant, vm: VirtualMachine, gpus: int
) -> tuple[VirtualMachineInstance, str]:
    """vm's VMI as the VMI webhook admitted it, then stripped of its affinity as KubeVirt's
    LiveUpdate sync strips it (the VM template has none); and the set's node."""
    bound = await eventually(lambda: _set(fleet, tenant.ns, vm.metadata.name, gpus), what="a set")
    node = bound[0].spec.node_name
    vmi = await admin.create(vmi_of(vm, tenant.ns, vm.metadata.name, fleet.gpus(gpus)))
    assert vmi.raw["spec"]["affinity"], "the VMI webhook pinned the VMI"
    synced = await admin.patch(
        VirtualMachineInstance, vmi.metadata.name, tenant.ns, {"spec": {"affinity": None}}
    )
    assert "affinity" not in synced.raw["spec"]
    return synced, node


@pytest.mark.parametrize("temp", [False, True], ids=["launcher", "wait-for-first-consumer"])
async def test_a_pod_of_a_vmi_that_lost_its_affinity_is_pinned_to_the_sets_node_over_tls(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder, temp: bool
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    await fleet.create_node("a")
    await fleet.create_node("b")
    tenant = Tenant(control_plane)
    await start_binder()
    vm = await fleet.create_vm(tenant.ns, "vm", gpus=2)
    vmi, node = await pinned_vmi(admin, fleet, tenant, vm, 2)
    pod = render_launcher_pod(vmi.raw, temp=temp)
    rendered = pod["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert rendered == [{"matchExpressions": [HOST_MODEL]}], "KubeVirt's own term, no pin"

    status, created = await tenant.create_pod(pod)

    assert status == 201, created
    terms = created["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    assert terms == [{"matchExpressions": [HOST_MODEL], "matchFields": [pin]}]
    slots = {n for n in created["spec"]["containers"][0]["resources"]["limits"] if "-s" in n}
    assert slots == {g["deviceName"] for g in vmi.raw["spec"]["domain"]["devices"]["gpus"]}


async def test_a_pod_holding_a_slot_that_is_not_its_sets_is_refused_over_tls(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    await fleet.create_node("a")
    tenant = Tenant(control_plane)
    await start_binder()
    vm = await fleet.create_vm(tenant.ns, "vm", gpus=1)
    vmi, node = await pinned_vmi(admin, fleet, tenant, vm, 1)
    raw = vmi.raw
    (gpu,) = raw["spec"]["domain"]["devices"]["gpus"]
    other = fleet.slot(0) if gpu["deviceName"] == fleet.slot(1) else fleet.slot(1)
    gpu["deviceName"] = other
    pod = render_launcher_pod(raw)

    status, refused = await tenant.create_pod(pod)

    assert status == 403, refused
    assert refused["message"] == (
        f'admission webhook "{POD_WEBHOOK}" denied the request: the pod holds slot resource '
        f"{other}, which is not one of the GPUs of VM {tenant.ns}/vm (on {node}): no VM can "
        "reach another's GPU"
    )


async def test_with_gpu_binder_down_only_objects_carrying_gpus_are_refused(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    """No binder runs: the webhooks' URLs answer nothing, and failurePolicy is Fail."""
    fleet = Fleet(admin)
    tenant = Tenant(control_plane)
    plain = VirtualMachineInstance.from_dict(builders.vmi_object("plain", tenant.ns))
    gpu = vmi_of(None, tenant.ns, "gpu", fleet.gpus(1))

    created, body = await tenant.create_vmi(plain)
    assert created == 201, body
    status, pod = await tenant.create_pod(render_launcher_pod(body))
    assert status == 201, pod

    refused, answer = await tenant.create_vmi(gpu)
    assert refused == 500, answer
    assert answer["reason"] == "InternalError"
    # The API server's words: whose webhook it could not call, and why.
    assert answer["message"].startswith(
        f'Internal error occurred: failed calling webhook "{VMI_WEBHOOK}": failed to call webhook'
    )
    assert "connection refused" in answer["message"]
    with_slot = render_launcher_pod(body)
    for part in ("limits", "requests"):
        with_slot["spec"]["containers"][0]["resources"][part][fleet.slot(0)] = "1"
    status, answer = await tenant.create_pod(with_slot)
    assert status == 500, answer
    assert f'failed calling webhook "{POD_WEBHOOK}"' in answer["message"]


async def _set(fleet: Fleet, ns: str, vm: str, n: int) -> list:  # type: ignore[type-arg]
    devices = await fleet.set_of(ns, vm)
    return devices if len(devices) == n else []
