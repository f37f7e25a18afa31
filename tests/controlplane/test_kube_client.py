"""KubeClient against a real API server: the Client protocol's verbs and errors."""

from __future__ import annotations

import asyncio

import pytest
from realcluster import Fleet, namespace

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUBindRequest, GPUDevice, GPUDeviceStatus
from gpu_binder.client.errors import AlreadyExists, Conflict, Gone, Invalid, NotFound
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient, load

pytestmark = pytest.mark.controlplane


def bind_request(ns: str, name: str) -> GPUBindRequest:
    return GPUBindRequest.model_validate(
        {
            "apiVersion": "gpu.cozystack.io/v1alpha1",
            "kind": "GPUBindRequest",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "vm": {"name": "vm"},
                "vmi": {"name": "vm"},
                "requests": [{"className": "c", "count": 1}],
            },
        }
    )


async def test_a_list_pages_through_every_object(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    fleet = Fleet(admin, gpus_per_node=5)
    await fleet.create_node("a")
    paged = KubeClient(await load(str(control_plane.kubeconfig)), page_size=2)
    async with paged:
        result = await paged.list(GPUDevice)
    names = {d.metadata.name for d in result.items if d.spec.device_id == fleet.device_id}
    assert len(names) == 5 and int(result.resource_version) > 0


async def test_a_status_write_with_a_stale_resource_version_conflicts(admin: KubeClient) -> None:
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_node("a")
    (device,) = await fleet.devices()
    status = GPUDeviceStatus(class_name="x")
    written = await admin.update_status(device.model_copy(update={"status": status}))
    assert written.status.class_name == "x"
    assert written.metadata.resource_version != device.metadata.resource_version

    with pytest.raises(Conflict):
        await admin.update_status(device.model_copy(update={"status": GPUDeviceStatus()}))


async def test_errors_are_typed(control_plane: ControlPlane, admin: KubeClient) -> None:
    with pytest.raises(NotFound):
        await admin.get(GPUDevice, "no-such-device")
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_node("a")
    (device,) = await fleet.devices()
    again = GPUDevice(metadata=ObjectMeta(name=device.metadata.name), spec=device.spec)
    with pytest.raises(AlreadyExists):
        await admin.create(again)
    with pytest.raises(Invalid):
        await admin.patch(GPUDevice, device.metadata.name, "", {"spec": {"pciAddress": "x"}})


async def test_server_side_apply_creates_and_owns_fields_as_gpu_binder(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns = namespace(control_plane)
    body = {"metadata": {"name": "kv", "namespace": ns}, "spec": {"configuration": {"a": 1}}}
    applied = await admin.apply(KubeVirt, body)
    assert applied.raw["spec"]["configuration"] == {"a": 1}
    managers = {m["manager"] for m in applied.raw["metadata"]["managedFields"]}
    assert managers == {"gpu-binder"}
    reapplied = await admin.apply(KubeVirt, {**body, "spec": {"configuration": {"b": 2}}})
    assert reapplied.raw["spec"]["configuration"] == {"b": 2}


async def test_a_dry_run_create_stores_nothing(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_node("a")
    (device,) = await fleet.devices()
    copy = GPUDevice(metadata=ObjectMeta(name=f"{device.metadata.name}-dry"), spec=device.spec)
    created = await admin.create(copy, dry_run=True)
    assert created.metadata.name == copy.metadata.name
    with pytest.raises(NotFound):
        await admin.get(GPUDevice, copy.metadata.name)


async def test_a_watch_resumes_from_a_resource_version_and_raises_gone_when_expired(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    ns = namespace(control_plane)
    listed = await admin.list(GPUBindRequest, ns)
    events = admin.watch(GPUBindRequest, ns, listed.resource_version)
    await admin.create(bind_request(ns, "r"))
    async with asyncio.timeout(10):
        first = await anext(aiter(events))
    await events.aclose()  # type: ignore[attr-defined]
    assert first.type == "ADDED" and first.object.metadata.name == "r"

    with pytest.raises(Gone):
        async for _ in admin.watch(GPUBindRequest, ns, resource_version="1"):
            pass


async def test_an_open_watch_leaves_every_request_connection_free(
    control_plane: ControlPlane, admin: KubeClient
) -> None:
    """A watch holds its connection for minutes: on the requests' pool (here of one) it
    made every request wait behind it, as a burst's writes made the webhook's reads."""
    ns = namespace(control_plane)
    async with KubeClient(await load(str(control_plane.kubeconfig)), pool=1) as one:
        listed = await one.list(GPUBindRequest, ns)
        events = one.watch(GPUBindRequest, ns, listed.resource_version)
        await admin.create(bind_request(ns, "r"))
        async with asyncio.timeout(10):
            await anext(aiter(events))  # its stream is open
            got = await one.get(GPUBindRequest, "r", ns)
        await events.aclose()  # type: ignore[attr-defined]
    assert got.metadata.name == "r"


async def test_a_sibling_answers_while_every_connection_of_its_twin_is_taken(
    control_plane: ControlPlane,
) -> None:
    """The lease's client is the manager's sibling: its renewals wait behind none of the
    manager's requests."""
    ns = namespace(control_plane)
    async with KubeClient(await load(str(control_plane.kubeconfig)), pool=1) as one:
        # One request that lasts: a watch sent as a plain request takes the only connection.
        query = {"watch": "1", "timeoutSeconds": "30"}
        held = one._send("GET", f"/api/v1/namespaces/{ns}/configmaps", None, query, "")
        async with held:
            twin = one.sibling()
            try:
                async with asyncio.timeout(10):
                    listed = await twin.list(GPUBindRequest, ns)
            finally:
                await twin.close()
    assert listed.items == []
