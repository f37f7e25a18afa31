"""The VMI webhook pins a VMI only to GPUs the API server holds bound to its VM.

The binder stages a pass's decisions in the world it shares with the webhook and writes
them one by one; a write answered 409 un-stages it and every write after it. A webhook that
pinned from the staged world admitted VMIs to devices that were never bound to their VM,
which the next pass then gave to another VM: two launcher pods on one slot (issue 12's
`bench start` at 100 nodes × 200 VMs).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from realcluster import BINDER_SA, Fleet, eventually, namespace, vmi_of

from conftest import StartBinder
from gpu_binder.api.types import DEVICES_ANNOTATION, GPUBindRequest, GPUDevice
from gpu_binder.client.errors import Conflict
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient, load
from gpu_binder.kube.manager import Manager

pytestmark = pytest.mark.controlplane


class HeldWrites(KubeClient):
    """The binder's client, once armed: its first GPUDevice status write waits until
    released, its second is answered 409 (as when another writer changed that device)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.armed = False
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.device_writes = 0

    async def update_status(self, obj: Any) -> Any:
        if self.armed and isinstance(obj, GPUDevice):
            self.device_writes += 1
            if self.device_writes == 1:
                self.holding.set()
                await self.release.wait()
            elif self.device_writes == 2:
                raise Conflict(f"injected: {obj.metadata.name} was written meanwhile")
        return await super().update_status(obj)


async def test_a_vmi_is_pinned_only_to_gpus_the_api_server_holds_bound_to_its_vm(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    held = HeldWrites(await load(str(control_plane.kubeconfig)), impersonate=BINDER_SA)
    manager = await start_binder(client=held)
    await eventually(lambda: _all_classified(fleet), what="the binder classified the node's GPUs")
    held.armed = True
    vm = await fleet.create_vm(ns, "vm", gpus=2)
    # The pass staged the VM's set and is writing its first device.
    await asyncio.wait_for(held.holding.wait(), 15)

    create = asyncio.create_task(admin.create(vmi_of(vm, ns, "vm", fleet.gpus(2))))
    try:
        # Admitted at once (pinned from the staged set), or waiting for a bind request
        # (handed to the leader's reconciler in memory, World.asked, or an object).
        await eventually(
            lambda: _done_or_asking(create, admin, ns, manager), what="the VMI admitted or asking"
        )
        pinned_while_held = create.done()
        held.release.set()
        vmi = await asyncio.wait_for(create, 30)
    finally:
        held.release.set()

    pinned = vmi.metadata.annotations[DEVICES_ANNOTATION].split(",")
    bound = {d.metadata.name for d in await fleet.set_of(ns, "vm")}
    assert set(pinned) <= bound, (
        f"pinned to {pinned} while the API server holds {sorted(bound)} bound to the VM"
        f"{' (admitted before the set was written)' if pinned_while_held else ''}"
    )


async def _all_classified(fleet: Fleet) -> bool:
    devices = await fleet.devices()
    return bool(devices) and all(d.status.class_name for d in devices)


async def _done_or_asking(
    create: asyncio.Task[Any], admin: KubeClient, ns: str, manager: Manager
) -> bool:
    if create.done() or manager.world.asked:
        return True
    return bool((await admin.list(GPUBindRequest, ns)).items)
