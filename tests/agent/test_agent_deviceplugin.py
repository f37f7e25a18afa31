"""The device plugin: each GPU of a `pinning: Device` class is a slot resource the kubelet
allocates by name, served over the kubelet's device-plugin API v1beta1."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from fake_kubelet import FakeKubelet
from fake_sysfs import L40S_GPUS, l40s_x4

from gpu_binder.agent.deviceplugin import DevicePluginManager, SlotDevice, api_pb2
from gpu_binder.agent.runner import AgentConfig, NodeAgent
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    DeviceMatch,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceStatus,
)
from gpu_binder.sim.memory import MemoryClient

RESOURCE = "gpu.cozystack.io/10de-26b9-s0"
ENDPOINT = "gpu-binder-10de-26b9-s0.sock"
GPU = L40S_GPUS[0]


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 108 bytes: keep them short, away from pytest's tmp.
    d = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def kubelet(plugin_dir: Path) -> AsyncIterator[FakeKubelet]:
    k = FakeKubelet(plugin_dir)
    await k.start()
    yield k
    await k.stop()


@pytest.fixture
async def manager(plugin_dir: Path) -> AsyncIterator[DevicePluginManager]:
    m = DevicePluginManager(plugin_dir)
    yield m
    await m.close()


def slot(healthy: bool = True, message: str = "") -> SlotDevice:
    return SlotDevice(RESOURCE, GPU, healthy, numa_node=0, iommu_group=12, message=message)


async def test_each_slot_resource_registers_with_the_kubelet(
    kubelet: FakeKubelet, manager: DevicePluginManager
) -> None:
    await manager.update([slot()])
    request = await kubelet.next_registration()
    assert (request.version, request.endpoint, request.resource_name) == (
        "v1beta1",
        ENDPOINT,
        RESOURCE,
    )
    assert manager.registered(RESOURCE)
    # No PreStartContainer and no preferred allocation: one device per resource.
    assert kubelet.options[RESOURCE] == api_pb2.DevicePluginOptions()


async def test_list_and_watch_streams_the_gpu_and_its_health_changes(
    kubelet: FakeKubelet, manager: DevicePluginManager
) -> None:
    await manager.update([slot()])
    await kubelet.next_registration()
    async with kubelet.plugin(ENDPOINT) as ch:
        stream = kubelet.list_and_watch(ch)
        first = await asyncio.wait_for(stream.read(), 5)
        assert [(d.ID, d.health) for d in first.devices] == [(GPU, "Healthy")]
        assert [n.ID for n in first.devices[0].topology.nodes] == [0]
        await manager.update([slot(healthy=False, message="bound to the nvidia driver")])
        second = await asyncio.wait_for(stream.read(), 5)
        assert [(d.ID, d.health) for d in second.devices] == [(GPU, "Unhealthy")]
        # A vanished GPU: the kubelet is told there is nothing left, and the stream ends.
        await manager.update([])
        last = await asyncio.wait_for(stream.read(), 5)
        assert list(last.devices) == []
        assert await asyncio.wait_for(stream.read(), 5) is grpc.aio.EOF


async def test_allocate_answers_the_pci_address_in_kubevirts_variable_and_the_vfio_devices(
    kubelet: FakeKubelet, manager: DevicePluginManager
) -> None:
    await manager.update([slot()])
    await kubelet.next_registration()
    async with kubelet.plugin(ENDPOINT) as ch:
        answer = await kubelet.allocate(ch, GPU)
    [container] = answer.container_responses
    assert dict(container.envs) == {"PCI_RESOURCE_GPU_COZYSTACK_IO_10DE-26B9-S0": GPU}
    assert [(d.host_path, d.container_path, d.permissions) for d in container.devices] == [
        ("/dev/vfio/vfio", "/dev/vfio/vfio", "mrw"),
        ("/dev/vfio/12", "/dev/vfio/12", "mrw"),
    ]


async def test_allocate_names_the_hosts_vfio_nodes_where_the_kubelets_host_has_them(
    kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    # A test node keeps its VFIO nodes in a fixture tree; the container still sees them
    # where virt-launcher opens them.
    manager = DevicePluginManager(plugin_dir, host_vfio_dir=Path("/srv/node/dev/vfio"))
    try:
        await manager.update([slot()])
        await kubelet.next_registration()
        async with kubelet.plugin(ENDPOINT) as ch:
            answer = await kubelet.allocate(ch, GPU)
    finally:
        await manager.close()
    [container] = answer.container_responses
    assert [(d.host_path, d.container_path) for d in container.devices] == [
        ("/srv/node/dev/vfio/vfio", "/dev/vfio/vfio"),
        ("/srv/node/dev/vfio/12", "/dev/vfio/12"),
    ]


async def test_allocate_refuses_an_unhealthy_gpu_and_a_device_it_does_not_serve(
    kubelet: FakeKubelet, manager: DevicePluginManager
) -> None:
    await manager.update([slot(healthy=False, message="reset failed")])
    await kubelet.next_registration()
    async with kubelet.plugin(ENDPOINT) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as unhealthy:
            await kubelet.allocate(ch, GPU)
        assert unhealthy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert unhealthy.value.details() == (
            f"{GPU} is unhealthy and is not handed out: reset failed"
        )
        with pytest.raises(grpc.aio.AioRpcError) as other:
            await kubelet.allocate(ch, "0000:99:00.0")
        assert other.value.code() == grpc.StatusCode.NOT_FOUND


async def test_after_a_kubelet_restart_the_plugin_serves_and_registers_again(
    kubelet: FakeKubelet, manager: DevicePluginManager
) -> None:
    await manager.update([slot()])
    await kubelet.next_registration()
    await kubelet.restart()
    assert not (kubelet.plugin_dir / ENDPOINT).exists()
    await manager.check()
    again = await kubelet.next_registration()
    assert again.resource_name == RESOURCE
    assert manager.registrations == 2
    async with kubelet.plugin(ENDPOINT) as ch:
        first = await asyncio.wait_for(kubelet.list_and_watch(ch).read(), 5)
        assert [d.ID for d in first.devices] == [GPU]


async def test_the_watchdog_finds_the_restart_by_itself(
    kubelet: FakeKubelet, manager: DevicePluginManager
) -> None:
    stop = asyncio.Event()
    watchdog = asyncio.create_task(manager.watch(stop, interval=0.05))
    await manager.update([slot()])
    await kubelet.next_registration()
    await kubelet.restart()
    assert (await kubelet.next_registration()).resource_name == RESOURCE
    stop.set()
    await watchdog


async def test_a_plugin_started_before_the_kubelet_registers_once_it_appears(
    plugin_dir: Path, manager: DevicePluginManager
) -> None:
    await manager.update([slot()])
    assert not manager.registered(RESOURCE)
    kubelet = FakeKubelet(plugin_dir)
    await kubelet.start()
    try:
        await manager.check()
        assert (await kubelet.next_registration()).resource_name == RESOURCE
    finally:
        await kubelet.stop()


async def test_the_agent_serves_the_gpus_of_device_classes_by_slot(
    tmp_path: Path, kubelet: FakeKubelet, manager: DevicePluginManager
) -> None:
    l40s_x4(tmp_path)
    client = MemoryClient()
    for name, pinning in (("l40s", "Device"), ("l40s-pool", "Node")):
        await client.create(
            GPUClass(
                metadata=ObjectMeta(name=name),
                spec=GPUClassSpec(
                    resource_name=f"nvidia.com/{name}",
                    match=DeviceMatch(vendorID="0x10de", deviceIDs=("0x26b9",)),
                    pinning=pinning,
                ),
            )
        )
    agent = NodeAgent(AgentConfig(node="node-a", root=tmp_path), client, plugins=manager)
    await agent.run_pass()
    assert manager.resources == []  # nothing is classified yet
    # The binder classifies: two GPUs are pinned per device, one by count, one not at all.
    devices = sorted(client.objects(GPUDevice), key=lambda d: d.spec.pci_address)
    for d, cls in zip(devices, ["l40s", "l40s", "l40s-pool"], strict=False):
        await client.update_status(d.model_copy(update={"status": GPUDeviceStatus(class_name=cls)}))
    report = await agent.run_pass()
    assert report.served == ["gpu.cozystack.io/10de-26b9-s0", "gpu.cozystack.io/10de-26b9-s1"]
    registered = {(await kubelet.next_registration()).resource_name for _ in range(2)}
    assert registered == set(report.served)
