"""Fixture hosts: sysfs and /dev/vfio trees shaped like the real ones, built in a temp dir.

Functions live at sys/devices/pci<domain>:<bus>/<bridge>/.../<address>, and everything
else points there through relative symlinks, as in the kernel's sysfs:
sys/bus/pci/devices/<address>, `driver` -> sys/bus/pci/drivers/<name>, `iommu_group` ->
sys/kernel/iommu_groups/<n>, `physfn` -> the physical function of an SR-IOV VF.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

NVIDIA = "0x10de"
BROADCOM = "0x1000"

H100_SXM = "0x2330"
L40S = "0x26b9"
RTX_4090 = "0x2684"
NVSWITCH = "0x22a3"
AD102_AUDIO = "0x22ba"

VGA = "0x030000"
DISPLAY_3D = "0x030200"
AUDIO = "0x040300"
OTHER_BRIDGE = "0x068000"
PCI_BRIDGE = "0x060400"


class FakeHost:
    """A host's sysfs under root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sys = root / "sys"
        self.bus = self.sys / "bus" / "pci" / "devices"
        self.bus.mkdir(parents=True, exist_ok=True)
        (root / "dev" / "vfio").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "vfio" / "vfio").touch()
        self._dirs: dict[str, Path] = {}
        self._next_group = 10

    def path(self, address: str) -> Path:
        return self._dirs[address]

    def _link(self, link: Path, target: Path) -> None:
        if link.is_symlink() or link.exists():
            link.unlink()
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))

    def _place(self, address: str, upstream: list[str]) -> Path:
        """upstream: the bridges above the function, root port first."""
        parent = self.sys / "devices" / f"pci{(upstream or [address])[0][:7]}"
        for i, bridge in enumerate(upstream):
            if bridge not in self._dirs:
                self.add_bridge(bridge, upstream[:i])
            parent = self._dirs[bridge]
        d = parent / address
        d.mkdir(parents=True, exist_ok=True)
        self._dirs[address] = d
        self._link(self.bus / address, d)
        return d

    def _write(self, d: Path, **files: str) -> None:
        for name, value in files.items():
            (d / name).write_text(value + "\n")

    def add_bridge(self, address: str, upstream: list[str]) -> None:
        d = self._place(address, upstream)
        self._write(d, vendor=BROADCOM, device="0xc030", **{"class": PCI_BRIDGE})
        self._write(d, numa_node="-1")
        self.bind(address, "pcieport")

    def add_function(
        self,
        address: str,
        *,
        vendor: str = NVIDIA,
        device: str = H100_SXM,
        klass: str = DISPLAY_3D,
        upstream: list[str] | None = None,
        driver: str | None = "vfio-pci",
        numa_node: int = -1,
        iommu_group: int | None = -1,
        vfio_dev: bool = True,
        reset: bool = True,
    ) -> str:
        """A PCI function; iommu_group -1 picks a fresh group, None leaves it without one."""
        d = self._place(address, upstream or [])
        self._write(d, vendor=vendor, device=device, **{"class": klass})
        self._write(d, subsystem_vendor=vendor, subsystem_device="0x16c1")
        self._write(d, numa_node=str(numa_node))
        if reset:
            (d / "reset").write_text("")
        self.bind(address, driver)
        if iommu_group == -1:
            iommu_group = self._next_group
            self._next_group += 1
        if iommu_group is not None:
            group = self.sys / "kernel" / "iommu_groups" / str(iommu_group)
            self._link(group / "devices" / address, d)
            self._link(d / "iommu_group", group)
            if vfio_dev:
                (self.root / "dev" / "vfio" / str(iommu_group)).touch()
        return address

    def add_vf(self, address: str, physfn: str, **kw: object) -> str:
        """An SR-IOV virtual function of physfn, which then reports its VF count."""
        pf = self.path(physfn)
        upstream = list(pf.relative_to(self.sys / "devices").parts[1:-1])
        self.add_function(address, upstream=upstream, **kw)  # type: ignore[arg-type]
        n = len(list(pf.glob("virtfn*")))
        self._link(self.path(address) / "physfn", pf)
        self._link(pf / f"virtfn{n}", self.path(address))
        self._write(pf, sriov_numvfs=str(n + 1))
        return address

    def iommu_group(self, address: str) -> int:
        return int(os.readlink(self.path(address) / "iommu_group").rsplit("/", 1)[1])

    # --- what happens to a running host -------------------------------------------------

    def bind(self, address: str, driver: str | None) -> None:
        link = self.path(address) / "driver"
        if link.is_symlink():
            link.unlink()
        if driver:
            drivers = self.sys / "bus" / "pci" / "drivers" / driver
            drivers.mkdir(parents=True, exist_ok=True)
            self._link(link, drivers)

    def load_driver(self, driver: str) -> None:
        """A driver's directory, as `modprobe` makes it (vfio-pci before any GPU uses it)."""
        (self.sys / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)

    def kernel(self) -> None:
        """What the kernel makes of the writes to drivers' unbind and bind files: an
        address written to unbind leaves that driver, one written to bind joins it when its
        driver_override allows. The files are emptied, as sysfs shows them."""
        drivers = sorted((self.sys / "bus" / "pci" / "drivers").iterdir())
        for action in ("unbind", "bind"):
            for d in drivers:
                f = d / action
                address = f.read_text().strip() if f.is_file() else ""
                if not address:
                    continue
                f.write_text("")
                if action == "unbind":
                    self.bind(address, None)
                    continue
                override = self.path(address) / "driver_override"
                wanted = override.read_text().strip() if override.exists() else ""
                if wanted in ("", d.name):
                    self.bind(address, d.name)

    def driver(self, address: str) -> str:
        link = self.path(address) / "driver"
        return os.path.basename(os.readlink(link)) if link.is_symlink() else ""

    def remove(self, address: str) -> None:
        """The function vanished (fell off the bus, or was unplugged)."""
        (self.bus / address).unlink()
        shutil.rmtree(self.path(address))
        del self._dirs[address]

    def make_unreadable(self, address: str, name: str) -> None:
        """Reading the file fails (EISDIR) — for root too, unlike a chmod."""
        f = self.path(address) / name
        if f.is_symlink() or f.is_file():
            f.unlink()
        f.mkdir()

    def remove_vfio_dev(self, group: int) -> None:
        (self.root / "dev" / "vfio" / str(group)).unlink()


# --- the hosts of the issue ---------------------------------------------------------------

# (GPU, root port, switch upstream port, switch downstream port, NUMA node)
HGX_H100 = [
    ("0000:18:00.0", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", 0),
    ("0000:2a:00.0", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", 0),
    ("0000:3a:00.0", "0000:37:01.0", "0000:38:00.0", "0000:39:00.0", 0),
    ("0000:5d:00.0", "0000:37:01.0", "0000:38:00.0", "0000:39:01.0", 0),
    ("0000:9a:00.0", "0000:97:01.0", "0000:98:00.0", "0000:99:00.0", 1),
    ("0000:ab:00.0", "0000:97:01.0", "0000:98:00.0", "0000:99:01.0", 1),
    ("0000:ba:00.0", "0000:b7:01.0", "0000:b8:00.0", "0000:b9:00.0", 1),
    ("0000:db:00.0", "0000:b7:01.0", "0000:b8:00.0", "0000:b9:01.0", 1),
]
H100_GPUS = [row[0] for row in HGX_H100]
NVSWITCHES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]


def hgx_h100(root: Path) -> FakeHost:
    """An HGX H100 board: 8 SXM GPUs in pairs behind PCIe switches, four per CPU socket,
    and four NVSwitches behind a switch of their own."""
    host = FakeHost(root)
    for gpu, rp, usp, dsp, numa in HGX_H100:
        host.add_function(gpu, device=H100_SXM, numa_node=numa, upstream=[rp, usp, dsp])
    for i, sw in enumerate(NVSWITCHES):
        host.add_function(
            sw,
            device=NVSWITCH,
            klass=OTHER_BRIDGE,
            driver="nvidia-nvswitch",
            upstream=["0000:02:01.0", "0000:03:00.0", f"0000:04:0{i}.0"],
            numa_node=0,
        )
    return host


# (GPU, root port, NUMA node)
L40S_X4 = [
    ("0000:4b:00.0", "0000:40:01.0", 0),
    ("0000:4c:00.0", "0000:40:03.0", 0),
    ("0000:ca:00.0", "0000:c0:01.0", 1),
    ("0000:cb:00.0", "0000:c0:03.0", 1),
]
L40S_GPUS = [row[0] for row in L40S_X4]


def l40s_x4(root: Path) -> FakeHost:
    """Four L40S PCIe cards straight under root ports, two per NUMA node."""
    host = FakeHost(root)
    for gpu, rp, numa in L40S_X4:
        host.add_function(gpu, device=L40S, numa_node=numa, upstream=[rp])
    return host
