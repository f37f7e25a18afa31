"""Which PCI functions are GPUs, and how they are grouped (DESIGN §5, issue 4 part 1)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from gpu_binder.agent.models import NVIDIA, model_name, model_of
from gpu_binder.agent.pci import (
    PCIFunction,
    SysfsError,
    group_members,
    list_addresses,
    read_class,
    read_function,
)

# Display controllers: 0x0300 VGA-compatible, 0x0302 3D (what data-center GPUs report).
GPU_CLASSES = ("0x0300", "0x0302")
# NVSwitches show up as NVIDIA functions of class 0x0680 ("other bridge").
NVSWITCH_CLASS = "0x0680"


@dataclass(frozen=True, slots=True)
class GPU:
    function: PCIFunction
    model: str
    nvlink_domain: str | None

    @property
    def address(self) -> str:
        return self.function.address


@dataclass(frozen=True, slots=True)
class Scan:
    """What one pass over sysfs found."""

    # The functions read in full, by address: GPUs, NVSwitches, and the other members of
    # the GPUs' IOMMU groups, which health looks at.
    functions: dict[str, PCIFunction]
    gpus: tuple[GPU, ...]
    # SR-IOV virtual functions of GPUs: reported, never served as whole GPUs.
    virtual_functions: tuple[PCIFunction, ...]
    nvswitches: tuple[str, ...]
    # Functions that exist but could not be read: address -> why. They are not "gone".
    unreadable: dict[str, str] = field(default_factory=dict)

    def gpu(self, address: str) -> GPU | None:
        return next((g for g in self.gpus if g.address == address), None)

    def notes(self) -> list[str]:
        """What a person should know about this scan, one sentence each."""
        out = [f"{a}: skipped, {why}" for a, why in sorted(self.unreadable.items())]
        out += [
            f"{vf.address}: SR-IOV virtual function of {vf.physfn}, not a whole GPU; skipped"
            for vf in self.virtual_functions
        ]
        for g in self.gpus:
            out += [f"{g.address}: {p}" for p in g.function.problems]
        return out


def is_gpu_class(f: PCIFunction) -> bool:
    return f.class_code[:6] in GPU_CLASSES


def scan(root: Path, vendors: Collection[str] = (NVIDIA,)) -> Scan:
    """The GPUs of the given vendors under root; SysfsError only when the bus cannot be listed."""
    wanted = {v.lower() for v in vendors}
    unreadable: dict[str, str] = {}
    # Most functions of a host are NICs, disks and bridges: two small reads rule them out.
    interesting: list[str] = []
    for address in list_addresses(root):
        try:
            vendor, klass = read_class(root, address)
        except SysfsError as e:
            unreadable[address] = str(e)
            continue
        gpu = vendor in wanted and klass[:6] in GPU_CLASSES
        if gpu or (vendor == NVIDIA and klass.startswith(NVSWITCH_CLASS)):
            interesting.append(address)

    functions: dict[str, PCIFunction] = {}

    def read(address: str) -> None:
        try:
            functions[address] = read_function(root, address)
        except SysfsError as e:
            unreadable[address] = str(e)

    for address in interesting:
        read(address)
    groups = {f.iommu_group for f in functions.values() if f.iommu_group is not None}
    for group in sorted(groups):
        for peer in group_members(root, group):
            if peer not in functions and peer not in unreadable:
                read(peer)

    nvswitches = tuple(
        a
        for a, f in functions.items()
        if f.vendor == NVIDIA and f.class_code.startswith(NVSWITCH_CLASS) and f.physfn is None
    )
    # Sysfs does not show NVLink wiring, but an NVSwitch baseboard links all of its SXM
    # GPUs together, so the node's SXM GPUs form one domain named after its first switch.
    domain = f"nvswitch-{_dashed(nvswitches[0])}" if nvswitches else None

    gpus: list[GPU] = []
    vfs: list[PCIFunction] = []
    for f in functions.values():
        if f.vendor not in wanted or not is_gpu_class(f):
            continue
        if f.physfn is not None:
            vfs.append(f)
            continue
        gpus.append(GPU(function=f, model=model_name(f.vendor, f.device), nvlink_domain=None))
    gpus = (
        [GPU(g.function, g.model, domain if _on_baseboard(g.function) else None) for g in gpus]
        if domain
        else gpus
    )
    return Scan(
        functions=functions,
        gpus=tuple(gpus),
        virtual_functions=tuple(vfs),
        nvswitches=nvswitches,
        unreadable=unreadable,
    )


def _on_baseboard(f: PCIFunction) -> bool:
    # A GPU the id table knows as a PCIe card is never on the NVSwitch baseboard; an
    # unknown NVIDIA GPU next to NVSwitches most likely is.
    if f.vendor != NVIDIA:
        return False
    model = model_of(f.vendor, f.device)
    return model is None or model.sxm


def _dashed(address: str) -> str:
    return address.replace(":", "-").replace(".", "-")
