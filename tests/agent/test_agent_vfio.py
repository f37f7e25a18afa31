"""vfio-pci binding by the agent, for classes with `vfioBinding: Agent`: driver_override,
unbind, bind through sysfs, for the GPU and its own other functions, never for a GPU a VMI
uses, and refused with the reason when the IOMMU group holds a device it may not take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fake_sysfs import AD102_AUDIO, AUDIO, L40S, FakeHost

from gpu_binder.agent.pci import PCIFunction, read_function
from gpu_binder.agent.runner import AgentConfig, NodeAgent
from gpu_binder.agent.vfio import SysfsDriverBinder
from gpu_binder.api.types import (
    Attachment,
    GPUDevice,
    GPUDeviceStatus,
    Health,
    ObjectRef,
    Phase,
)
from gpu_binder.sim import builders
from gpu_binder.sim.memory import MemoryClient

NODE = "node-a"
GPU = "0000:4b:00.0"
GPU_AUDIO = "0000:4b:00.1"
NIC = "0000:4c:00.0"
SINCE = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Kernel:
    """The sysfs writes the agent makes, then what the kernel does with them."""

    host: FakeHost
    calls: list[str]

    def bind(self, function: PCIFunction) -> None:
        self.calls.append(function.address)
        SysfsDriverBinder(self.host.root).bind(function)
        self.host.kernel()


def a_host(root: Path, *, audio_driver: str = "snd_hda_intel", nic: bool = False) -> FakeHost:
    """An L40S on nvidia with its HD-audio function in its IOMMU group (12)."""
    host = FakeHost(root)
    host.load_driver("vfio-pci")
    host.add_function(GPU, device=L40S, driver="nvidia", iommu_group=12, upstream=["0000:40:01.0"])
    host.add_function(
        GPU_AUDIO,
        device=AD102_AUDIO,
        klass=AUDIO,
        driver=audio_driver,
        iommu_group=12,
        upstream=["0000:40:01.0"],
    )
    if nic:
        # Behind the same root port, with no ACS: one group with the GPU.
        host.add_function(
            NIC,
            vendor="0x15b3",
            device="0x101d",
            klass="0x020000",
            driver="mlx5_core",
            iommu_group=12,
            upstream=["0000:40:01.0"],
        )
    return host


async def classified(
    host: FakeHost, binding: str = "Agent"
) -> tuple[MemoryClient, Kernel, NodeAgent]:
    """The node's GPUDevice, as a first pass made it, classified l40s by the binder."""
    client = MemoryClient()
    client.put(builders.gpu_class("l40s", "nvidia.com/L40S", L40S, vfioBinding=binding))
    # Before the binder classified it, the GPU is of no class: nothing to bind.
    await NodeAgent(AgentConfig(node=NODE, root=host.root), client, binder=Refuse()).run_pass()
    d = device(client)
    status = GPUDeviceStatus(class_name="l40s", phase=Phase.AVAILABLE)
    await client.update_status(d.model_copy(update={"status": status}))
    kernel = Kernel(host, [])
    return client, kernel, NodeAgent(AgentConfig(node=NODE, root=host.root), client, binder=kernel)


class Refuse:
    def bind(self, function: PCIFunction) -> None:
        raise AssertionError("nothing to bind before the device is classified")


def device(client: MemoryClient) -> GPUDevice:
    return next(d for d in client.objects(GPUDevice) if d.spec.pci_address == GPU)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return a_host(tmp_path)


def test_the_sysfs_writes_are_override_unbind_and_bind_as_vfio_manager_makes_them(
    host: FakeHost,
) -> None:
    SysfsDriverBinder(host.root).bind(read_function(host.root, GPU))
    assert (host.path(GPU) / "driver_override").read_text() == "vfio-pci"
    drivers = host.root / "sys" / "bus" / "pci" / "drivers"
    assert (drivers / "nvidia" / "unbind").read_text() == GPU
    assert (drivers / "vfio-pci" / "bind").read_text() == GPU


async def test_a_gpu_of_an_agent_class_is_moved_to_vfio_pci_with_its_audio_function(
    host: FakeHost,
) -> None:
    client, kernel, agent = await classified(host)
    assert device(client).spec.health == Health.UNHEALTHY, "on nvidia: not usable yet"
    report = await agent.run_pass()
    assert kernel.calls == [GPU, GPU_AUDIO]
    assert report.bindings.done == {GPU: [GPU, GPU_AUDIO]}
    assert (host.driver(GPU), host.driver(GPU_AUDIO)) == ("vfio-pci", "vfio-pci")
    spec = device(client).spec
    assert (spec.driver, spec.health, spec.health_message) == ("vfio-pci", Health.HEALTHY, "")
    assert await agent.run_pass() and kernel.calls == [GPU, GPU_AUDIO], "done once"


async def test_a_group_holding_a_device_it_may_not_take_is_refused_with_the_reason(
    tmp_path: Path,
) -> None:
    host = a_host(tmp_path, nic=True)
    client, kernel, agent = await classified(host)
    await agent.run_pass()
    assert kernel.calls == [], "nothing written"
    assert host.driver(GPU) == "nvidia" and host.driver(NIC) == "mlx5_core"
    spec = device(client).spec
    assert spec.health == Health.UNHEALTHY
    assert (
        "not bound to vfio-pci by the agent: IOMMU group 12 also holds 0000:4c:00.0 (bound to "
        "mlx5_core), which is not a function of this GPU and which the agent may not take"
    ) in spec.health_message


async def test_a_class_that_leaves_binding_to_others_is_left_alone(host: FakeHost) -> None:
    client, kernel, agent = await classified(host, binding="External")
    await agent.run_pass()
    assert kernel.calls == [] and host.driver(GPU) == "nvidia"
    assert "bound to the nvidia driver instead of vfio-pci" in device(client).spec.health_message
    assert "by the agent" not in device(client).spec.health_message


async def test_a_gpu_a_vmi_uses_is_never_touched(host: FakeHost) -> None:
    client, kernel, agent = await classified(host)
    vmi = ObjectRef(namespace="t", name="vm", uid="u")
    d = device(client)
    status = d.status.model_copy(
        update={"phase": Phase.ATTACHED, "attachment": Attachment(vmi=vmi, since=SINCE)}
    )
    await client.update_status(d.model_copy(update={"status": status}))
    await agent.run_pass()
    assert kernel.calls == []


async def test_without_the_vfio_pci_driver_loaded_it_says_to_load_it(tmp_path: Path) -> None:
    host = a_host(tmp_path)
    (host.root / "sys" / "bus" / "pci" / "drivers" / "vfio-pci").rmdir()
    client, kernel, agent = await classified(host)
    await agent.run_pass()
    assert kernel.calls == []
    assert "the vfio-pci driver is not loaded on the node (modprobe vfio-pci)" in (
        device(client).spec.health_message
    )


async def test_a_write_that_fails_is_reported_and_retried(host: FakeHost) -> None:
    client, _, agent = await classified(host)
    (host.path(GPU) / "driver_override").mkdir()  # a write there fails (EISDIR)
    await agent.run_pass()
    spec = device(client).spec
    assert spec.health == Health.UNHEALTHY
    assert f"writing /sys/bus/pci/devices/{GPU}/driver_override: Is a directory" in (
        spec.health_message
    )
    (host.path(GPU) / "driver_override").rmdir()
    await agent.run_pass()
    assert device(client).spec.health == Health.HEALTHY


async def test_a_gpu_of_a_node_pinned_class_waits_while_a_vmi_of_its_class_runs(
    host: FakeHost,
) -> None:
    other = host.add_function("0000:ca:00.0", device=L40S, upstream=["0000:c0:01.0"])
    client = MemoryClient()
    client.put(
        builders.gpu_class("l40s", "nvidia.com/L40S", L40S, vfioBinding="Agent", pinning="Node")
    )
    await NodeAgent(AgentConfig(node=NODE, root=host.root), client, binder=Refuse()).run_pass()
    for d in client.objects(GPUDevice):
        attached = d.spec.pci_address == other
        status = GPUDeviceStatus(
            class_name="l40s",
            phase=Phase.ATTACHED if attached else Phase.AVAILABLE,
            attachment=Attachment(vmi=ObjectRef(namespace="t", name="vm"), since=SINCE)
            if attached
            else None,
        )
        await client.update_status(d.model_copy(update={"status": status}))
    kernel = Kernel(host, [])
    await NodeAgent(AgentConfig(node=NODE, root=host.root), client, binder=kernel).run_pass()
    # Another plugin chose which of the class's GPUs that VMI got: none is moved meanwhile.
    assert kernel.calls == []
