"""The DevicePlugin service of one slot resource: one GPU, capacity 1 (DESIGN "Pinning")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gpu_binder.agent.deviceplugin import api_pb2
from gpu_binder.agent.deviceplugin.rpc import HEALTHY, UNHEALTHY, service_handler
from gpu_binder.agent.slots import pci_resource_env

# virt-launcher opens the VFIO container (vfio) and the GPU's group device, always here.
VFIO_DIR = Path("/dev/vfio")


@dataclass(frozen=True, slots=True)
class SlotDevice:
    """What the kubelet learns of one GPU served under its slot resource."""

    resource: str
    pci_address: str
    healthy: bool
    numa_node: int | None = None
    iommu_group: int | None = None
    message: str = ""


class SlotPlugin:
    """Serves one slot resource; ListAndWatch streams every change of its GPU's health."""

    def __init__(self, device: SlotDevice, host_vfio_dir: Path = VFIO_DIR) -> None:
        self._device = device
        # Where the kubelet's host has the VFIO nodes: Allocate's host paths are the
        # runtime's, not the agent's (--root), so they are named on their own.
        self.host_vfio_dir = host_vfio_dir
        self._retired = False
        self._version = 0
        self._changed = asyncio.Condition()
        # ListAndWatch streams still open; set once none is, so a retired plugin's server
        # stops only after the kubelet was handed the empty list.
        self._streams = 0
        self._drained = asyncio.Event()
        self._drained.set()

    @property
    def device(self) -> SlotDevice:
        return self._device

    @property
    def resource(self) -> str:
        return self._device.resource

    async def set_device(self, device: SlotDevice) -> None:
        if device == self._device:
            return
        async with self._changed:
            self._device = device
            self._version += 1
            self._changed.notify_all()

    async def retire(self) -> None:
        """Tell the kubelet the GPU is gone (an empty list), then end the streams."""
        async with self._changed:
            self._retired = True
            self._version += 1
            self._changed.notify_all()

    async def drained(self) -> None:
        """Wait until no ListAndWatch stream is open."""
        await self._drained.wait()

    def handler(self) -> Any:
        return service_handler(
            "DevicePlugin",
            {
                "GetDevicePluginOptions": self.get_device_plugin_options,
                "ListAndWatch": self.list_and_watch,
                "GetPreferredAllocation": self.get_preferred_allocation,
                "Allocate": self.allocate,
                "PreStartContainer": self.pre_start_container,
            },
        )

    def devices(self) -> list[api_pb2.Device]:
        if self._retired:
            return []
        d = self._device
        topology = None
        if d.numa_node is not None:
            topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=d.numa_node)])
        return [
            api_pb2.Device(
                ID=d.pci_address, health=HEALTHY if d.healthy else UNHEALTHY, topology=topology
            )
        ]

    async def get_device_plugin_options(
        self, request: api_pb2.Empty, context: Any
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions()

    async def list_and_watch(
        self, request: api_pb2.Empty, context: Any
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        seen = -1
        self._streams += 1
        self._drained.clear()
        try:
            while True:
                async with self._changed:
                    while self._version == seen:
                        await self._changed.wait()
                    seen = self._version
                    snapshot = self.devices()
                    retired = self._retired
                yield api_pb2.ListAndWatchResponse(devices=snapshot)
                if retired:
                    return
        finally:
            self._streams -= 1
            if self._streams == 0:
                self._drained.set()

    async def allocate(
        self, request: api_pb2.AllocateRequest, context: Any
    ) -> api_pb2.AllocateResponse:
        d = self._device
        answers = []
        for container in request.container_requests:
            for wanted in container.devices_ids:
                if self._retired or wanted != d.pci_address:
                    await context.abort(
                        grpc.StatusCode.NOT_FOUND, f"{d.resource} serves no device {wanted}"
                    )
                if not d.healthy:
                    await context.abort(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"{wanted} is unhealthy and is not handed out: {d.message}",
                    )
            answers.append(self._answer(list(container.devices_ids)))
        return api_pb2.AllocateResponse(container_responses=answers)

    def _answer(self, ids: list[str]) -> api_pb2.ContainerAllocateResponse:
        d = self._device
        names = ["vfio"] + ([str(d.iommu_group)] if d.iommu_group is not None else [])
        specs = [
            api_pb2.DeviceSpec(
                container_path=str(VFIO_DIR / name),
                host_path=str(self.host_vfio_dir / name),
                permissions="mrw",
            )
            for name in names
        ]
        return api_pb2.ContainerAllocateResponse(
            envs={pci_resource_env(d.resource): ",".join(ids)} if ids else {}, devices=specs
        )

    async def get_preferred_allocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Any
    ) -> api_pb2.PreferredAllocationResponse:
        # One device per resource leaves nothing to prefer: echo what must be included.
        return api_pb2.PreferredAllocationResponse(
            container_responses=[
                api_pb2.ContainerPreferredAllocationResponse(
                    deviceIDs=list(r.must_include_deviceIDs)
                    or list(r.available_deviceIDs)[: r.allocation_size]
                )
                for r in request.container_requests
            ]
        )

    async def pre_start_container(
        self, request: api_pb2.PreStartContainerRequest, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()
