"""Discovery: which PCI functions of a host are GPUs, and what sysfs says about them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_sysfs import (
    AD102_AUDIO,
    AUDIO,
    H100_GPUS,
    L40S_GPUS,
    NVSWITCHES,
    RTX_4090,
    VGA,
    FakeHost,
    hgx_h100,
    l40s_x4,
)

from gpu_binder.agent.discovery import scan
from gpu_binder.agent.pci import SysfsError


def test_hgx_h100_has_eight_gpus_and_the_nvswitches_are_not_gpus(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    found = scan(tmp_path)
    assert [g.address for g in found.gpus] == H100_GPUS
    assert list(found.nvswitches) == NVSWITCHES
    assert {g.model for g in found.gpus} == {"GH100 [H100 SXM5 80GB]"}


def test_gpus_next_to_nvswitches_form_one_nvlink_domain(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    found = scan(tmp_path)
    assert {g.nvlink_domain for g in found.gpus} == {"nvswitch-0000-05-00-0"}


def test_each_gpu_reports_its_ids_driver_numa_node_iommu_group_and_pcie_switch(
    tmp_path: Path,
) -> None:
    host = hgx_h100(tmp_path)
    gpus = scan(tmp_path).gpus
    first, second, fifth = gpus[0], gpus[1], gpus[4]
    f = first.function
    assert (f.vendor, f.device, f.class_code) == ("0x10de", "0x2330", "0x030200")
    assert (f.subsystem_vendor, f.subsystem_device) == ("0x10de", "0x16c1")
    assert f.driver == "vfio-pci"
    assert f.numa_node == 0 and fifth.function.numa_node == 1
    assert f.iommu_group == host.iommu_group(H100_GPUS[0])
    assert f.has_reset
    # GPUs in pairs behind one PCIe switch: named by the switch's upstream port.
    assert f.pcie_switch == second.function.pcie_switch == "0000:16:00.0"
    assert fifth.function.pcie_switch == "0000:98:00.0"


def test_l40s_cards_split_over_two_numa_nodes_and_have_no_nvlink_domain(tmp_path: Path) -> None:
    l40s_x4(tmp_path)
    found = scan(tmp_path)
    assert [g.address for g in found.gpus] == L40S_GPUS
    assert [g.function.numa_node for g in found.gpus] == [0, 0, 1, 1]
    assert {g.nvlink_domain for g in found.gpus} == {None}
    assert {g.model for g in found.gpus} == {"AD102GL [L40S]"}
    # Straight under a root port: no PCIe switch.
    assert {g.function.pcie_switch for g in found.gpus} == {None}


def test_a_pcie_card_beside_nvswitches_stays_out_of_their_domain(tmp_path: Path) -> None:
    host = hgx_h100(tmp_path)
    host.add_function("0000:e1:00.0", device="0x26b9", upstream=["0000:e0:01.0"])
    found = scan(tmp_path)
    assert found.gpu("0000:e1:00.0") is not None
    assert found.gpu("0000:e1:00.0").nvlink_domain is None  # type: ignore[union-attr]


def test_numa_node_minus_one_means_unknown(tmp_path: Path) -> None:
    FakeHost(tmp_path).add_function("0000:01:00.0", numa_node=-1)
    assert scan(tmp_path).gpus[0].function.numa_node is None


def test_the_audio_function_on_the_gpus_slot_is_skipped(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.add_function("0000:01:00.0", device=RTX_4090, klass=VGA, iommu_group=7)
    host.add_function("0000:01:00.1", device=AD102_AUDIO, klass=AUDIO, iommu_group=7)
    found = scan(tmp_path)
    assert [g.address for g in found.gpus] == ["0000:01:00.0"]


def test_only_the_vendors_asked_for_are_discovered(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.add_function("0000:01:00.0")
    host.add_function("0000:02:00.0", vendor="0x1002", device="0x74a1")
    assert [g.address for g in scan(tmp_path).gpus] == ["0000:01:00.0"]
    amd = scan(tmp_path, vendors=["0x1002"])
    assert [g.address for g in amd.gpus] == ["0000:02:00.0"]


def test_sriov_virtual_functions_are_reported_as_such_not_as_gpus(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    pf = L40S_GPUS[0]
    host.bind(pf, "nvidia")
    host.add_vf("0000:4b:00.4", pf, device="0x26b9")
    host.add_vf("0000:4b:00.5", pf, device="0x26b9")
    found = scan(tmp_path)
    assert [g.address for g in found.gpus] == L40S_GPUS
    assert [vf.address for vf in found.virtual_functions] == ["0000:4b:00.4", "0000:4b:00.5"]
    assert {vf.physfn for vf in found.virtual_functions} == {pf}
    assert found.gpu(pf).function.sriov_numvfs == 2  # type: ignore[union-attr]
    assert (
        "0000:4b:00.4: SR-IOV virtual function of 0000:4b:00.0, not a whole GPU; skipped"
        in found.notes()
    )


def test_a_function_whose_ids_cannot_be_read_is_skipped_with_the_reason(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    host.make_unreadable(L40S_GPUS[1], "vendor")
    found = scan(tmp_path)
    assert L40S_GPUS[1] not in [g.address for g in found.gpus]
    assert found.unreadable == {
        L40S_GPUS[1]: f"cannot read /sys/bus/pci/devices/{L40S_GPUS[1]}/vendor: Is a directory"
    }
    assert any(n.startswith(f"{L40S_GPUS[1]}: skipped, cannot read") for n in found.notes())


def test_an_unreadable_optional_file_is_a_note_not_a_lost_gpu(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    host.make_unreadable(L40S_GPUS[2], "numa_node")
    gpu = scan(tmp_path).gpu(L40S_GPUS[2])
    assert gpu is not None and gpu.function.numa_node is None
    assert gpu.function.problems == (
        f"cannot read /sys/bus/pci/devices/{L40S_GPUS[2]}/numa_node: Is a directory",
    )


def test_garbage_in_an_id_file_is_named_in_the_error(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.add_function("0000:01:00.0")
    (host.path("0000:01:00.0") / "device").write_text("banana\n")
    found = scan(tmp_path)
    assert found.unreadable["0000:01:00.0"] == (
        "/sys/bus/pci/devices/0000:01:00.0/device holds 'banana', not a 4-digit hex id"
    )


def test_a_root_without_sysfs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SysfsError, match=r"cannot list /sys/bus/pci/devices: .*--root"):
        scan(tmp_path)
