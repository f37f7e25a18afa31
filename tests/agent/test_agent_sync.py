"""Sync: one GPUDevice per GPU of the node, through the client interface, writing only changes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fake_sysfs import H100_GPUS, L40S_GPUS, hgx_h100, l40s_x4

from gpu_binder.agent.runner import AgentConfig, NodeAgent
from gpu_binder.agent.sync import NODE_LABEL
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import FINALIZER, GPUDevice, GPUDeviceSpec, Health, device_name
from gpu_binder.sim.memory import MemoryClient

NODE = "node-a"


def agent(root: Path, client: MemoryClient, node: str = NODE) -> NodeAgent:
    return NodeAgent(AgentConfig(node=node, root=root), client)


def by_address(client: MemoryClient, node: str = NODE) -> dict[str, GPUDevice]:
    return {d.spec.pci_address: d for d in client.objects(GPUDevice) if d.spec.node_name == node}


async def test_the_first_pass_creates_one_gpudevice_per_gpu(tmp_path: Path) -> None:
    host = hgx_h100(tmp_path)
    client = MemoryClient()
    report = await agent(tmp_path, client).run_pass()
    devices = by_address(client)
    assert sorted(devices) == H100_GPUS
    assert report.sync.created == [device_name(NODE, a) for a in H100_GPUS]
    first = devices[H100_GPUS[0]]
    assert first.name == "node-a-0000-18-00-0"
    assert first.metadata.labels == {NODE_LABEL: NODE}
    assert first.spec == GPUDeviceSpec(
        node_name=NODE,
        pci_address="0000:18:00.0",
        slot=0,
        vendor_id="0x10de",
        device_id="0x2330",
        model="GH100 [H100 SXM5 80GB]",
        numa_node=0,
        iommu_group=host.iommu_group("0000:18:00.0"),
        nvlink_domain="nvswitch-0000-05-00-0",
        pcie_switch="0000:16:00.0",
        driver="vfio-pci",
        health=Health.HEALTHY,
    )
    assert [devices[a].spec.slot for a in H100_GPUS] == list(range(8))


async def test_gpus_behind_one_pcie_switch_say_so(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    client = MemoryClient()
    await agent(tmp_path, client).run_pass()
    devices = by_address(client)
    switches = {a: devices[a].spec.pcie_switch for a in H100_GPUS}
    assert switches[H100_GPUS[0]] == switches[H100_GPUS[1]] == "0000:16:00.0"
    assert len(set(switches.values())) > 1


async def test_a_pass_over_an_unchanged_node_writes_nothing(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    writes = client.writes
    report = await a.run_pass()
    assert client.writes == writes
    assert not report.changed


async def test_a_driver_change_updates_that_devices_spec_alone(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    before = by_address(client)
    host.bind(L40S_GPUS[3], "nvidia")
    report = await a.run_pass()
    after = by_address(client)
    assert report.sync.updated == [device_name(NODE, L40S_GPUS[3])]
    changed = after[L40S_GPUS[3]].spec
    assert (changed.driver, changed.health) == ("nvidia", Health.UNHEALTHY)
    assert changed.health_message.startswith("bound to the nvidia driver instead of vfio-pci")
    for address in L40S_GPUS[:3]:
        assert after[address].metadata.resource_version == before[address].metadata.resource_version


async def test_a_vanished_gpus_gpudevice_is_deleted(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    host.remove(L40S_GPUS[1])
    report = await a.run_pass()
    assert report.sync.deleted == [device_name(NODE, L40S_GPUS[1])]
    assert sorted(by_address(client)) == [L40S_GPUS[0], *L40S_GPUS[2:]]


async def test_a_new_gpu_takes_the_lowest_slot_its_vanished_predecessor_no_longer_holds(
    tmp_path: Path,
) -> None:
    host = l40s_x4(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    # The binder's finalizer keeps the vanished GPU's object (and slot 1) while a VM holds it.
    gone = by_address(client)[L40S_GPUS[1]]
    client.put(
        gone.model_copy(
            update={"metadata": gone.metadata.model_copy(update={"finalizers": (FINALIZER,)})}
        )
    )
    host.remove(L40S_GPUS[1])
    await a.run_pass()
    assert by_address(client)[L40S_GPUS[1]].metadata.deletion_timestamp is not None
    host.add_function("0000:e1:00.0", device="0x26b9", upstream=["0000:e0:01.0"])
    await a.run_pass()
    assert by_address(client)["0000:e1:00.0"].spec.slot == 4
    # Once the binder lets the old object go, the next new GPU gets slot 1 back.
    client.put(
        by_address(client)[L40S_GPUS[1]].model_copy(
            update={"metadata": gone.metadata.model_copy(update={"finalizers": ()})}
        )
    )
    await client.delete(GPUDevice, gone.name)
    host.add_function("0000:e2:00.0", device="0x26b9", upstream=["0000:e0:02.0"])
    await a.run_pass()
    assert by_address(client)["0000:e2:00.0"].spec.slot == 1


async def test_a_restarted_agent_reads_the_slots_back_from_the_api(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    client = MemoryClient()
    await agent(tmp_path, client).run_pass()
    # Someone renumbered the slots (say, an older agent did): they are the truth now.
    for d in by_address(client).values():
        renumbered = d.spec.model_copy(update={"slot": 7 - (d.spec.slot or 0)})
        client.put(d.model_copy(update={"spec": renumbered}))
    writes = client.writes
    await agent(tmp_path, client).run_pass()
    assert [by_address(client)[a].spec.slot for a in H100_GPUS] == list(range(7, -1, -1))
    assert client.writes == writes


async def test_an_admins_unschedulable_and_the_last_reset_survive_rescans(tmp_path: Path) -> None:
    l40s_x4(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    d = by_address(client)[L40S_GPUS[0]]
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    await client.update(
        d.model_copy(
            update={"spec": d.spec.model_copy(update={"unschedulable": True, "last_reset": when})}
        )
    )
    writes = client.writes
    await a.run_pass()
    kept = by_address(client)[L40S_GPUS[0]].spec
    assert (kept.unschedulable, kept.last_reset) == (True, when)
    assert client.writes == writes


async def test_the_release_a_reset_cleaned_survives_rescans(tmp_path: Path) -> None:
    l40s_x4(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    d = by_address(client)[L40S_GPUS[0]]
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    spec = d.spec.model_copy(update={"last_reset": when, "last_reset_for": when})
    await client.update(d.model_copy(update={"spec": spec}))
    writes = client.writes
    await a.run_pass()
    assert by_address(client)[L40S_GPUS[0]].spec.last_reset_for == when
    assert client.writes == writes


async def test_a_gpu_whose_files_cannot_be_read_is_unhealthy_not_deleted(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    host.make_unreadable(L40S_GPUS[2], "vendor")
    report = await a.run_pass()
    assert report.sync.deleted == []
    spec = by_address(client)[L40S_GPUS[2]].spec
    assert spec.health == Health.UNHEALTHY
    assert spec.health_message == (
        "its sysfs files cannot be read (cannot read "
        "/sys/bus/pci/devices/0000:ca:00.0/vendor: Is a directory)"
    )
    assert spec.slot == 2


async def test_a_scan_that_cannot_list_the_bus_writes_nothing(tmp_path: Path) -> None:
    l40s_x4(tmp_path)
    client = MemoryClient()
    await agent(tmp_path, client).run_pass()
    writes = client.writes
    await agent(tmp_path / "wrong-root", client)._logged_pass()
    assert client.writes == writes
    assert len(by_address(client)) == 4


async def test_other_nodes_devices_are_left_alone(tmp_path: Path) -> None:
    l40s_x4(tmp_path)
    client = MemoryClient()
    await agent(tmp_path, client, node="node-b").run_pass()
    await agent(tmp_path / "empty", client)._logged_pass()
    (tmp_path / "empty" / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    await agent(tmp_path / "empty", client).run_pass()
    assert len(by_address(client, "node-b")) == 4


async def test_an_unlabelled_object_of_this_node_is_adopted(tmp_path: Path) -> None:
    l40s_x4(tmp_path)
    client = MemoryClient()
    name = device_name(NODE, L40S_GPUS[0])
    spec = GPUDeviceSpec(node_name=NODE, pci_address=L40S_GPUS[0], device_id="0x26b9", slot=3)
    client.put(GPUDevice(metadata=ObjectMeta(name=name), spec=spec))
    report = await agent(tmp_path, client).run_pass()
    adopted = by_address(client)[L40S_GPUS[0]]
    assert name in report.sync.updated
    assert adopted.metadata.labels == {NODE_LABEL: NODE}
    assert adopted.spec.model == "AD102GL [L40S]"
    assert report.sync.errors == []


async def test_a_conflicting_write_is_reported_and_redone_next_pass(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    client = MemoryClient()
    a = agent(tmp_path, client)
    await a.run_pass()
    host.bind(L40S_GPUS[0], None)
    client.conflict_next_write(GPUDevice, device_name(NODE, L40S_GPUS[0]))
    report = await a.run_pass()
    assert len(report.sync.errors) == 1 and "updating node-a-0000-4b-00-0" in report.sync.errors[0]
    await a.run_pass()
    assert by_address(client)[L40S_GPUS[0]].spec.driver == ""
