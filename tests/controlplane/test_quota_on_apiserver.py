"""GPU quotas on a real API server with real ResourceQuota objects: the binder, under its
own ServiceAccount, watches them; a VMI starting past its namespace's quota is denied by
the webhook (over TLS) with the numbers, two VMIs racing for the last unit get one GPU
between them, a lowered quota disturbs nothing running (gpu_binder_quota_gpus says used
above hard) and only stops new binds, a quota on no class's name limits nothing, and a
malformed entry is reported on the quota and the class."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from realcluster import Fleet, eventually, namespace, put, run_vmi, vmi_of

from conftest import StartBinder
from gpu_binder.api.kinds import Event
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import GPUClass, GPUDevice
from gpu_binder.client.errors import ApiError
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient

pytestmark = pytest.mark.controlplane


def resource_quota(cp: ControlPlane, ns: str, hard: dict[str, str], name: str = "gpus") -> None:
    put(
        cp,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"hard": hard},
        },
    )


async def test_a_start_past_the_quota_is_denied_with_used_hard_and_asked(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    resource_quota(control_plane, ns, {f"requests.{fleet.resource}": "2"})
    await start_binder()
    await fleet.create_vm(ns, "first", gpus=2, running=False)  # reserved, never started
    await eventually(lambda: _held(fleet, ns, "first", 2), what="the first VM's reservation")
    second = await fleet.create_vm(ns, "second", gpus=1)

    with pytest.raises(ApiError) as denied:
        await admin.create(vmi_of(second, ns, "second", fleet.gpus(1)))

    message = denied.value.message
    assert f"namespace {ns} holds 2 of the 2 × {fleet.class_name}" in message
    assert f"requests.{fleet.resource}: 2" in message and "asks for 1 more" in message
    said = await eventually(lambda: _events(admin, ns, "second", "GPUQuotaExceeded"), what="Event")
    assert "holds 2 of the 2" in said[0].note
    assert await fleet.set_of(ns, "second") == []


async def test_two_vmis_racing_for_the_last_unit_get_one_gpu_between_them(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    resource_quota(control_plane, ns, {f"limits.{fleet.resource}": "1"})
    await start_binder()

    async def start(name: str) -> str:
        try:
            await admin.create(vmi_of(None, ns, name, fleet.gpus(1)))
        except ApiError as e:
            return e.message
        return "admitted"

    outcomes = await asyncio.gather(start("one"), start("two"))
    assert outcomes.count("admitted") == 1, outcomes
    [refused] = [o for o in outcomes if o != "admitted"]
    assert f"holds 1 of the 1 × {fleet.class_name}" in refused
    held = [d for d in await fleet.devices() if d.status.binding is not None]
    assert len(held) == 1


async def test_a_malformed_quota_entry_is_reported_on_the_quota_and_the_class(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    ns = namespace(control_plane)
    # The API server stores any quantity; one that is no whole number of GPUs is the
    # binder's to refuse reading as more than it allows. Not a quantity at all, it is
    # refused by the API server itself.
    resource_quota(control_plane, ns, {f"requests.{fleet.resource}": "1500m"})
    answer = control_plane.request(
        "POST",
        f"/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": "bad"}, "spec": {"hard": {f"requests.{fleet.resource}": "x"}}},
    )
    assert answer.status == 400, answer.body  # "quantities must match the regular expression"
    await start_binder()

    said = await eventually(
        lambda: _events(admin, ns, "gpus", "GPUQuotaMalformed"), what="an Event on the quota"
    )
    assert said[0].regarding["kind"] == "ResourceQuota"
    assert "'1500m' is not a whole number of GPUs; enforced as 1" in said[0].note
    cond = await eventually(lambda: _quota_condition(admin, fleet), what="the class condition")
    assert cond["status"] == "False" and cond["reason"] == "MalformedQuota"
    assert f"{ns}/gpus" in cond["message"]


async def test_a_lowered_quota_disturbs_nothing_running_and_stops_new_binds(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    resource_quota(control_plane, ns, {f"requests.{fleet.resource}": "2"})
    manager = await start_binder()
    vm = await fleet.create_vm(ns, "vm", gpus=2)
    bound = await eventually(lambda: _held(fleet, ns, "vm", 2), what="the VM's set")
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(2)))
    await run_vmi(admin, vmi, node)

    resource_quota(control_plane, ns, {f"requests.{fleet.resource}": "1"})  # lowered
    labels = {"namespace": ns, "class_name": fleet.class_name}

    async def quota_gpus() -> tuple[float | None, float | None] | None:
        get = manager.metrics.registry.get_sample_value
        seen = (
            get("gpu_binder_quota_gpus", {**labels, "kind": "used"}),
            get("gpu_binder_quota_gpus", {**labels, "kind": "hard"}),
        )
        return seen if seen == (2, 1) else None

    await eventually(quota_gpus, what="gpu_binder_quota_gpus used 2, hard 1")
    await fleet.create_vm(ns, "other", gpus=1)
    said = await eventually(lambda: _events(admin, ns, "other", "GPUQuotaExceeded"), what="Event")
    assert "holds 2 of the 1" in said[0].note
    await asyncio.sleep(2.5)  # passes at the 1 s resync: none takes the running VM's GPUs
    held = await _held(fleet, ns, "vm", 2)
    assert sorted(d.metadata.name for d in held) == sorted(d.metadata.name for d in bound)
    assert all(d.status.attachment is not None for d in held)
    assert (await admin.get(VirtualMachineInstance, "vm", ns)).metadata.deletion_timestamp is None
    assert await fleet.set_of(ns, "other") == []


async def test_a_quota_on_a_name_no_class_has_limits_nothing(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    hard = {"requests.nvidia.com/gpu": "0", f"requests.{fleet.resource}-other": "0"}
    resource_quota(control_plane, ns, {**hard, "requests.cpu": "1"})
    await start_binder()
    await fleet.create_vm(ns, "vm", gpus=2)
    await eventually(lambda: _held(fleet, ns, "vm", 2), what="bound past no quota of its class")
    cond = await eventually(lambda: _quota_condition(admin, fleet, "True"), what="QuotasValid")
    assert cond["reason"] == "WellFormed"
    assert await _events(admin, ns, "gpus", "GPUQuotaMalformed") == []


async def _held(fleet: Fleet, ns: str, vm: str, n: int) -> list[GPUDevice]:
    devices = await fleet.set_of(ns, vm)
    return devices if len(devices) == n else []


async def _events(admin: KubeClient, ns: str, name: str, reason: str) -> list[Event]:
    items = (await admin.list(Event, ns)).items
    return [e for e in items if e.regarding.get("name") == name and e.reason == reason]


async def _quota_condition(
    admin: KubeClient, fleet: Fleet, status: str = "False"
) -> dict[str, Any] | None:
    cls = await admin.get(GPUClass, fleet.class_name)
    for c in cls.status.conditions:
        if c.type == "QuotasValid" and c.status == status:
            return c.to_dict()
    return None
