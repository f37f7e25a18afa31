"""Health: Healthy only when a VM can really get the GPU; otherwise the reason in words."""

from __future__ import annotations

from pathlib import Path

from fake_sysfs import AD102_AUDIO, AUDIO, L40S_GPUS, RTX_4090, VGA, FakeHost, l40s_x4

from gpu_binder.agent.discovery import scan
from gpu_binder.agent.health import Verdict, assess
from gpu_binder.api.types import Health


def verdict(root: Path, address: str) -> Verdict:
    found = scan(root)
    gpu = found.gpu(address)
    assert gpu is not None
    return assess(gpu, found, root)


def test_a_gpu_on_vfio_pci_with_its_vfio_group_is_healthy(tmp_path: Path) -> None:
    l40s_x4(tmp_path)
    assert verdict(tmp_path, L40S_GPUS[0]) == Verdict(Health.HEALTHY, "")


def test_a_gpu_bound_to_nvidia_instead_of_vfio_pci_is_unhealthy(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    host.bind(L40S_GPUS[3], "nvidia")
    assert verdict(tmp_path, L40S_GPUS[3]) == Verdict(
        Health.UNHEALTHY,
        "bound to the nvidia driver instead of vfio-pci, so the host owns it and it cannot "
        "be passed through to a VM",
    )
    assert verdict(tmp_path, L40S_GPUS[2]).health == Health.HEALTHY


def test_a_gpu_bound_to_no_driver_is_unhealthy(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    host.bind(L40S_GPUS[0], None)
    assert verdict(tmp_path, L40S_GPUS[0]).message == (
        "bound to no driver; it must be bound to vfio-pci to reach a VM"
    )


def test_a_missing_dev_vfio_group_is_unhealthy(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    group = host.iommu_group(L40S_GPUS[1])
    host.remove_vfio_dev(group)
    assert verdict(tmp_path, L40S_GPUS[1]).message == (
        f"/dev/vfio/{group} does not exist, so no VM can open its IOMMU group"
    )


def test_a_gpu_without_an_iommu_group_is_unhealthy(tmp_path: Path) -> None:
    FakeHost(tmp_path).add_function("0000:01:00.0", iommu_group=None)
    assert verdict(tmp_path, "0000:01:00.0").message == (
        "has no IOMMU group: the IOMMU is off (boot with intel_iommu=on or amd_iommu=on)"
    )


def test_an_audio_function_in_the_group_must_be_on_vfio_pci_too(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.add_function("0000:01:00.0", device=RTX_4090, klass=VGA, iommu_group=7)
    host.add_function(
        "0000:01:00.1", device=AD102_AUDIO, klass=AUDIO, iommu_group=7, driver="snd_hda_intel"
    )
    assert verdict(tmp_path, "0000:01:00.0").message == (
        "IOMMU group 7 also holds 0000:01:00.1, bound to snd_hda_intel: every device of the "
        "group must be bound to vfio-pci"
    )
    host.bind("0000:01:00.1", "vfio-pci")
    assert verdict(tmp_path, "0000:01:00.0").health == Health.HEALTHY


def test_a_gpu_with_sriov_turned_on_is_not_a_whole_gpu(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    host.add_vf("0000:4b:00.4", L40S_GPUS[0], device="0x26b9")
    assert verdict(tmp_path, L40S_GPUS[0]).message == (
        "SR-IOV is on with 1 virtual function: a whole GPU is passed through only with "
        "sriov_numvfs 0"
    )


def test_every_reason_is_given_at_once(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    host.bind(L40S_GPUS[0], "nvidia")
    host.remove_vfio_dev(host.iommu_group(L40S_GPUS[0]))
    host.make_unreadable(L40S_GPUS[0], "numa_node")
    reasons = verdict(tmp_path, L40S_GPUS[0]).message.split("; ")
    assert len(reasons) == 3
    assert reasons[0].startswith("cannot read /sys/bus/pci/devices/0000:4b:00.0/numa_node")
    assert reasons[1].startswith("bound to the nvidia driver")
    assert reasons[2].startswith("/dev/vfio/")
