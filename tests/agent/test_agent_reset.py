"""Reset: a released GPU is reset before anyone else gets it, or reported as unusable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from fake_sysfs import L40S_GPUS, FakeHost, l40s_x4

from gpu_binder.agent.runner import AgentConfig, NodeAgent
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
RELEASED = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW = RELEASED + timedelta(seconds=5)
GPU = L40S_GPUS[0]


def agent(root: Path, client: MemoryClient, now: datetime = NOW) -> NodeAgent:
    return NodeAgent(AgentConfig(node=NODE, root=root), client, clock=lambda: now)


def device(client: MemoryClient, address: str = GPU) -> GPUDevice:
    return next(d for d in client.objects(GPUDevice) if d.spec.pci_address == address)


async def set_status(client: MemoryClient, address: str, **status: object) -> None:
    d = device(client, address)
    await client.update_status(d.model_copy(update={"status": GPUDeviceStatus(**status)}))


def reset_writes(host: FakeHost, address: str = GPU) -> str:
    return (host.path(address) / "reset").read_text()


async def node_with_a_cleaning_gpu(root: Path) -> tuple[FakeHost, MemoryClient]:
    host = l40s_x4(root)
    client = MemoryClient()
    await agent(root, client).run_pass()
    await set_status(client, GPU, phase=Phase.CLEANING, released_at=RELEASED)
    return host, client


async def test_a_cleaning_gpu_is_reset_through_sysfs_and_records_last_reset(
    tmp_path: Path,
) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    report = await agent(tmp_path, client).run_pass()
    assert reset_writes(host) == "1"
    assert report.resets.done == {GPU: NOW}
    spec = device(client).spec
    assert (spec.last_reset, spec.health) == (NOW, Health.HEALTHY)
    # The other GPUs were not touched.
    assert reset_writes(host, L40S_GPUS[1]) == ""


async def test_a_reset_echoes_the_release_it_cleaned_in_last_reset_for(tmp_path: Path) -> None:
    _, client = await node_with_a_cleaning_gpu(tmp_path)
    report = await agent(tmp_path, client).run_pass()
    assert report.resets.released == {GPU: RELEASED}
    assert device(client).spec.last_reset_for == RELEASED


async def test_a_node_clock_behind_the_binders_resets_once_per_release(tmp_path: Path) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    behind = RELEASED - timedelta(hours=1)
    await agent(tmp_path, client, now=behind).run_pass()
    assert reset_writes(host) == "1"
    (host.path(GPU) / "reset").write_text("")
    writes = client.writes
    # lastReset is earlier than releasedAt, yet the echo says this release is done.
    await agent(tmp_path, client, now=behind + timedelta(seconds=10)).run_pass()
    assert reset_writes(host) == ""
    assert client.writes == writes
    spec = device(client).spec
    assert (spec.last_reset, spec.last_reset_for) == (behind, RELEASED)


async def test_a_node_clock_ahead_of_the_binders_still_resets_for_the_next_release(
    tmp_path: Path,
) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    ahead = RELEASED + timedelta(days=1)
    await agent(tmp_path, client, now=ahead).run_pass()
    # Released again an hour later by the binder's clock: before the first lastReset.
    second = RELEASED + timedelta(hours=1)
    await set_status(client, GPU, phase=Phase.CLEANING, released_at=second)
    (host.path(GPU) / "reset").write_text("")
    await agent(tmp_path, client, now=ahead + timedelta(seconds=1)).run_pass()
    assert reset_writes(host) == "1"
    assert device(client).spec.last_reset_for == second


async def test_an_older_agents_last_reset_only_record_brings_one_reset_that_echoes_the_release(
    tmp_path: Path,
) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    d = device(client)
    await client.update(
        d.model_copy(update={"spec": d.spec.model_copy(update={"last_reset": NOW})})
    )
    await agent(tmp_path, client).run_pass()
    assert reset_writes(host) == "1"
    assert device(client).spec.last_reset_for == RELEASED


async def test_a_gpu_reset_since_its_release_is_not_reset_again(tmp_path: Path) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    await agent(tmp_path, client).run_pass()
    (host.path(GPU) / "reset").write_text("")
    writes = client.writes
    await agent(tmp_path, client, now=NOW + timedelta(seconds=10)).run_pass()
    assert reset_writes(host) == ""
    assert client.writes == writes


async def test_a_second_release_brings_a_second_reset(tmp_path: Path) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    await agent(tmp_path, client).run_pass()
    later = NOW + timedelta(hours=1)
    await set_status(client, GPU, phase=Phase.CLEANING, released_at=later)
    (host.path(GPU) / "reset").write_text("")
    await agent(tmp_path, client, now=later + timedelta(seconds=1)).run_pass()
    assert reset_writes(host) == "1"
    assert device(client).spec.last_reset == later + timedelta(seconds=1)


async def test_a_gpu_that_cannot_be_reset_is_unhealthy_and_never_marked_clean(
    tmp_path: Path,
) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    (host.path(GPU) / "reset").unlink()
    report = await agent(tmp_path, client).run_pass()
    spec = device(client).spec
    assert spec.last_reset is None
    assert spec.health == Health.UNHEALTHY
    assert spec.health_message == (
        "function-level reset failed: the device offers no reset method (sysfs has no reset "
        "file); it stays out of use until a reset succeeds"
    )
    assert report.resets.failed == {GPU: spec.health_message}
    assert device(client).status.phase == Phase.CLEANING


async def test_a_failing_reset_write_names_the_file_and_the_error(tmp_path: Path) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    host.make_unreadable(GPU, "reset")
    await agent(tmp_path, client).run_pass()
    assert device(client).spec.health_message == (
        f"function-level reset failed: writing /sys/bus/pci/devices/{GPU}/reset: Is a "
        "directory; it stays out of use until a reset succeeds"
    )


async def test_a_failed_reset_is_retried_and_a_success_makes_the_gpu_healthy(
    tmp_path: Path,
) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    (host.path(GPU) / "reset").unlink()
    await agent(tmp_path, client).run_pass()
    # A restarted agent still knows: the API holds the failure.
    await agent(tmp_path, client).run_pass()
    assert device(client).spec.health == Health.UNHEALTHY
    (host.path(GPU) / "reset").write_text("")
    later = NOW + timedelta(minutes=1)
    await agent(tmp_path, client, now=later).run_pass()
    spec = device(client).spec
    assert (spec.health, spec.health_message, spec.last_reset) == (Health.HEALTHY, "", later)


async def test_a_restarted_agent_remembers_a_failure_behind_other_reasons(
    tmp_path: Path,
) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    (host.path(GPU) / "reset").unlink()
    host.remove_vfio_dev(host.iommu_group(GPU))
    await agent(tmp_path, client).run_pass()
    first = device(client).spec.health_message
    assert first.startswith("/dev/vfio/") and "; function-level reset failed: " in first
    writes = client.writes
    await agent(tmp_path, client).run_pass()
    assert device(client).spec.health_message == first
    assert client.writes == writes


async def test_a_gpu_with_a_vmi_on_it_is_never_reset(tmp_path: Path) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    vmi = ObjectRef(namespace="t", name="vm-1", uid="u1")
    await set_status(
        client,
        GPU,
        phase=Phase.CLEANING,
        released_at=RELEASED,
        attachment=Attachment(vmi=vmi, since=RELEASED),
    )
    await agent(tmp_path, client).run_pass()
    assert reset_writes(host) == ""
    assert device(client).spec.last_reset is None


async def test_a_gpu_under_a_host_driver_is_not_reset(tmp_path: Path) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    host.bind(GPU, "nvidia")
    await agent(tmp_path, client).run_pass()
    assert reset_writes(host) == ""
    assert device(client).spec.last_reset is None
    assert device(client).spec.health == Health.UNHEALTHY


async def test_gpus_in_other_phases_are_not_reset(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    client = MemoryClient()
    await agent(tmp_path, client).run_pass()
    for address, phase in zip(L40S_GPUS, [Phase.AVAILABLE, Phase.BOUND, Phase.LOST], strict=False):
        await set_status(client, address, phase=phase, released_at=RELEASED)
    await agent(tmp_path, client).run_pass()
    assert [reset_writes(host, a) for a in L40S_GPUS] == ["", "", "", ""]


async def pinned_by(client: MemoryClient, pinning: str) -> None:
    """The node's GPUs are of class l40s, pinned as given; GPU is Cleaning and the next
    GPU runs a VMI."""
    client.put(builders.gpu_class("l40s", "nvidia.com/L40S", "0x26b5", pinning=pinning))
    await set_status(client, GPU, phase=Phase.CLEANING, released_at=RELEASED, class_name="l40s")
    vmi = ObjectRef(namespace="t", name="vm-1", uid="u1")
    running = Attachment(vmi=vmi, since=RELEASED)
    await set_status(
        client, L40S_GPUS[1], phase=Phase.ATTACHED, class_name="l40s", attachment=running
    )


async def test_a_node_pinned_gpu_waits_while_a_vmi_of_its_class_runs_on_the_node(
    tmp_path: Path,
) -> None:
    # Another plugin hands out a Node class's GPUs by count: the released one may be the
    # one the running VMI got.
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    await pinned_by(client, "Node")
    await agent(tmp_path, client).run_pass()
    assert reset_writes(host) == ""
    await set_status(client, L40S_GPUS[1], phase=Phase.AVAILABLE, class_name="l40s")
    await agent(tmp_path, client).run_pass()
    assert reset_writes(host) == "1"


async def test_a_device_pinned_gpu_is_reset_beside_a_running_vmi(tmp_path: Path) -> None:
    host, client = await node_with_a_cleaning_gpu(tmp_path)
    await pinned_by(client, "Device")
    await agent(tmp_path, client).run_pass()
    assert reset_writes(host) == "1"
