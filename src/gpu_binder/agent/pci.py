"""One PCI function as sysfs shows it: ids, driver, NUMA node, IOMMU group, SR-IOV, bridges.

Every path is read under a root directory, so the same code reads the host's /sys and
a fixture tree a test built.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

PCI_DEVICES = Path("sys/bus/pci/devices")
ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
BRIDGE_CLASS = "0x0604"


class SysfsError(Exception):
    """A sysfs file the agent needs could not be read; the message names it and why."""


@dataclass(frozen=True, slots=True)
class PCIFunction:
    address: str
    vendor: str
    device: str
    # The 24-bit class code, e.g. 0x030200 for a 3D controller.
    class_code: str
    subsystem_vendor: str | None
    subsystem_device: str | None
    driver: str
    numa_node: int | None
    iommu_group: int | None
    # The physical function's address when this is an SR-IOV virtual function.
    physfn: str | None
    sriov_numvfs: int
    has_reset: bool
    # Addresses of the bridges above it, nearest first, up to the root port.
    upstream: tuple[str, ...]
    # Optional attributes that could not be read, in words; the function is still usable.
    problems: tuple[str, ...] = ()

    @property
    def is_bridge(self) -> bool:
        return self.class_code.startswith(BRIDGE_CLASS)

    @property
    def pcie_switch(self) -> str | None:
        """The upstream port of the PCIe switch it sits behind, when it sits behind one."""
        # Below a switch the chain is downstream port, upstream port, ..., root port.
        return self.upstream[1] if len(self.upstream) >= 3 else None


def shown(root: Path, path: Path) -> str:
    """A path as the host sees it, for messages: /sys/..., not the fixture's temp dir."""
    try:
        return "/" + str(path.relative_to(root))
    except ValueError:
        return str(path)


def read_text(root: Path, path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        raise SysfsError(f"cannot read {shown(root, path)}: {e.strerror or e}") from None


def link_name(root: Path, path: Path) -> str | None:
    """The last component of a symlink's target, None when there is no link."""
    try:
        return os.path.basename(os.readlink(path))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SysfsError(f"cannot read link {shown(root, path)}: {e.strerror or e}") from None


def read_int(root: Path, path: Path) -> int:
    text = read_text(root, path)
    try:
        return int(text)
    except ValueError:
        raise SysfsError(f"{shown(root, path)} holds {text!r}, not a number") from None


def _hex_id(root: Path, path: Path, digits: int) -> str:
    text = read_text(root, path).lower()
    if not re.fullmatch(rf"0x[0-9a-f]{{{digits}}}", text):
        raise SysfsError(f"{shown(root, path)} holds {text!r}, not a {digits}-digit hex id")
    return text


def list_addresses(root: Path) -> list[str]:
    """Addresses of every PCI function on the host, sorted."""
    base = root / PCI_DEVICES
    try:
        names = os.listdir(base)
    except OSError as e:
        raise SysfsError(
            f"cannot list {shown(root, base)}: {e.strerror or e} (is --root the host's root?)"
        ) from None
    return sorted(n for n in names if ADDRESS.match(n))


def read_class(root: Path, address: str) -> tuple[str, str]:
    """Vendor and class code alone: enough to tell whether a function needs a full read."""
    d = root / PCI_DEVICES / address
    return _hex_id(root, d / "vendor", 4), _hex_id(root, d / "class", 6)


def group_members(root: Path, group: int) -> list[str]:
    """Addresses of the functions in an IOMMU group; empty when sysfs does not list them."""
    try:
        return sorted(os.listdir(root / "sys" / "kernel" / "iommu_groups" / str(group) / "devices"))
    except OSError:
        return []


def read_function(root: Path, address: str) -> PCIFunction:
    """Read one function; SysfsError when its ids cannot be read, since then it is unknown."""
    d = root / PCI_DEVICES / address
    vendor = _hex_id(root, d / "vendor", 4)
    device = _hex_id(root, d / "device", 4)
    class_code = _hex_id(root, d / "class", 6)
    problems: list[str] = []

    def optional_id(name: str) -> str | None:
        try:
            return _hex_id(root, d / name, 4)
        except SysfsError as e:
            if (d / name).exists() or (d / name).is_symlink():
                problems.append(str(e))
            return None

    def optional_link(name: str) -> str | None:
        try:
            return link_name(root, d / name)
        except SysfsError as e:
            problems.append(str(e))
            return None

    def optional_int(name: str) -> int | None:
        if not (d / name).exists():
            return None
        try:
            return read_int(root, d / name)
        except SysfsError as e:
            problems.append(str(e))
            return None

    # The kernel writes -1 when the platform does not say which NUMA node a device is on.
    numa = optional_int("numa_node")
    numvfs = optional_int("sriov_numvfs") or 0
    group = optional_link("iommu_group")
    return PCIFunction(
        address=address,
        vendor=vendor,
        device=device,
        class_code=class_code,
        subsystem_vendor=optional_id("subsystem_vendor"),
        subsystem_device=optional_id("subsystem_device"),
        driver=optional_link("driver") or "",
        numa_node=numa if numa is not None and numa >= 0 else None,
        iommu_group=int(group) if group and group.isdigit() else None,
        physfn=optional_link("physfn"),
        sriov_numvfs=numvfs,
        has_reset=(d / "reset").exists(),
        upstream=_upstream(d),
        problems=tuple(problems),
    )


def _upstream(device_dir: Path) -> tuple[str, ...]:
    # The resolved path of a function is its place in the PCI tree: every parent that is
    # an address is a bridge above it.
    real = Path(os.path.realpath(device_dir))
    return tuple(p.name for p in real.parents if ADDRESS.match(p.name))
