"""A GPU host's sysfs and /dev/vfio, written in a directory: what the agent reads with
``--root`` on a development node (`make dev-cluster ARGS=--kubelet`), where no GPU is.

The shape is the kernel's, as tests/agent/fake_sysfs.py (the tests' richer builder) makes
it: functions under sys/devices/pci0000:00/, linked from sys/bus/pci/devices/, bound to
vfio-pci, each in an IOMMU group of its own whose /dev/vfio node exists. The device nodes
are character devices 1:3 (/dev/null's numbers), since the container runtime copies the
major:minor of the host paths Allocate names.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["write_gpu_host"]

FIRST_GROUP = 10


def _char_device(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def write_gpu_host(
    root: Path, gpus: int = 4, vendor: str = "0x10de", device: str = "0x2330"
) -> list[str]:
    """Write gpus GPUs (vendor:device, 3D controllers on vfio-pci) under root; their PCI
    addresses (0000:18:00.0, 0000:19:00.0, ...)."""
    sys_ = root / "sys"
    drivers = sys_ / "bus" / "pci" / "drivers" / "vfio-pci"
    drivers.mkdir(parents=True, exist_ok=True)
    vfio = root / "dev" / "vfio"
    vfio.mkdir(parents=True, exist_ok=True)
    _char_device(vfio / "vfio")
    addresses = []
    for i in range(gpus):
        address = f"0000:{0x18 + i:02x}:00.0"
        d = sys_ / "devices" / "pci0000:00" / address
        d.mkdir(parents=True, exist_ok=True)
        files = {
            "vendor": vendor,
            "device": device,
            "class": "0x030200",
            "subsystem_vendor": vendor,
            "subsystem_device": "0x16c1",
            "numa_node": str(i * 2 // max(1, gpus)),
        }
        for name, value in files.items():
            (d / name).write_text(value + "\n")
        (d / "reset").write_text("")
        _link(sys_ / "bus" / "pci" / "devices" / address, d)
        _link(d / "driver", drivers)
        group = FIRST_GROUP + i
        groups = sys_ / "kernel" / "iommu_groups" / str(group)
        _link(groups / "devices" / address, d)
        _link(d / "iommu_group", groups)
        _char_device(vfio / str(group))
        addresses.append(address)
    return addresses
