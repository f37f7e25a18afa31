"""Binding GPUs to vfio-pci, for the classes that ask the agent to (`vfioBinding: Agent`).

A GPU reaches a VM only through vfio-pci. Where nothing else binds it (the GPU Operator's
vfio-manager, `vfio-pci.ids=` on the kernel command line), the agent does what those do,
through sysfs, for each function of the GPU's IOMMU group that needs it:

1. `vfio-pci` into `/sys/bus/pci/devices/<address>/driver_override`, so no other driver
   takes the function again (on a rescan, a reprobe or the next boot's hotplug);
2. the address into `/sys/bus/pci/devices/<address>/driver/unbind`, which hands it back
   from its current driver (nvidia, snd_hda_intel, ...);
3. the address into `/sys/bus/pci/drivers/vfio-pci/bind`.

VFIO passes an IOMMU group whole: every endpoint in it must be on vfio-pci, pci-stub or
no driver. The agent takes the GPU and its own other functions (the same bus and device
number: its HD-audio and USB-C functions); a group holding anything else (a NIC behind a
switch without ACS) is refused, and the GPU is reported Unhealthy saying which device
stands in the way. It never touches a GPU a VMI uses (its GPUDevice is attached; and a VMI
can hold only a GPU on vfio-pci, which needs no binding), and a GPU of a `pinning: Node`
class waits while a VMI of its class runs on the node, since another plugin chose which
GPU that VMI got. A GPU bound to a stopped VM is bound to vfio-pci: it must be, to start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpu_binder.agent.discovery import Scan
from gpu_binder.agent.health import GROUP_SAFE_DRIVERS, VFIO_DRIVER
from gpu_binder.agent.pci import PCI_DEVICES, PCIFunction, group_members, shown
from gpu_binder.api.types import GPUClass, GPUDevice

DRIVERS = Path("sys/bus/pci/drivers")
# Health messages of a refused or failed binding start with this.
BINDING_REFUSED = "not bound to vfio-pci by the agent"


class BindError(Exception):
    """A sysfs write of the binding failed; the message says which and why."""


class DriverBinder(Protocol):
    def bind(self, function: PCIFunction) -> None:
        """Move one PCI function to vfio-pci; BindError when it cannot be done."""
        ...


@dataclass(frozen=True, slots=True)
class SysfsDriverBinder:
    root: Path

    def _write(self, path: Path, value: str) -> None:
        try:
            with open(path, "w") as f:
                f.write(value)
        except OSError as e:
            hint = ""
            if getattr(e, "errno", None) == 30:  # EROFS: the DaemonSet mounts it read-only
                hint = " (the agent's /sys/bus/pci must be mounted writable: agent.vfioBinding)"
            raise BindError(f"writing {shown(self.root, path)}: {e.strerror or e}{hint}") from None

    def bind(self, function: PCIFunction) -> None:
        device = self.root / PCI_DEVICES / function.address
        self._write(device / "driver_override", VFIO_DRIVER)
        if function.driver:
            self._write(device / "driver" / "unbind", function.address)
        self._write(self.root / DRIVERS / VFIO_DRIVER / "bind", function.address)


@dataclass(slots=True)
class BindOutcome:
    # GPU address -> the functions moved to vfio-pci for it (the GPU and its companions).
    done: dict[str, list[str]] = field(default_factory=dict)
    # GPU address -> health message: why it was not bound.
    refused: dict[str, str] = field(default_factory=dict)


def same_device(a: str, b: str) -> bool:
    """Two functions of one PCI device: domain, bus and device agree (0000:4b:00.x)."""
    return a.split(".")[0] == b.split(".")[0]


def functions_to_bind(gpu: PCIFunction, scan: Scan, root: Path) -> list[PCIFunction] | str:
    """The functions of the GPU's IOMMU group to move to vfio-pci, GPU first; or, when the
    group holds a device the agent may not take, why not (in a health message's words)."""
    if gpu.iommu_group is None:
        return "it has no IOMMU group, so VFIO cannot take it (boot with the IOMMU on)"
    if not (root / DRIVERS / VFIO_DRIVER).is_dir():
        return "the vfio-pci driver is not loaded on the node (modprobe vfio-pci)"
    out = [gpu] if gpu.driver != VFIO_DRIVER else []
    members = group_members(root, gpu.iommu_group) or [gpu.address]
    for address in sorted(members):
        if address == gpu.address:
            continue
        peer = scan.functions.get(address)
        if peer is None:
            return f"IOMMU group {gpu.iommu_group} also holds {address}, which cannot be read"
        if peer.is_bridge or peer.driver in GROUP_SAFE_DRIVERS:
            continue
        if not same_device(address, gpu.address):
            return (
                f"IOMMU group {gpu.iommu_group} also holds {address} (bound to "
                f"{peer.driver}), which is not a function of this GPU and which the agent "
                "may not take: bind it to vfio-pci yourself, or give the GPU a group of its "
                "own (ACS on the PCIe switch, another slot)"
            )
        out.append(peer)
    return out


def candidates(
    devices: Iterable[GPUDevice],
    scan: Scan,
    classes: Collection[GPUClass],
) -> list[GPUDevice]:
    """Devices of the agent-binding classes not (wholly) on vfio-pci, that nothing uses."""
    binding = {c.metadata.name for c in classes if c.spec.vfio_binding == "Agent"}
    node_pinned = {c.metadata.name for c in classes if c.spec.pinning == "Node"}
    devices = list(devices)
    busy = {
        d.status.class_name
        for d in devices
        if d.status.class_name in node_pinned and d.status.attachment is not None
    }
    out = []
    for d in devices:
        s = d.status
        if s.class_name not in binding or s.class_name in busy:
            continue
        if s.attachment is not None:
            continue  # a VMI has it: nothing is taken from under it
        if scan.gpu(d.spec.pci_address) is None:
            continue
        out.append(d)
    return out


async def bind_devices(
    devices: Iterable[GPUDevice], scan: Scan, root: Path, binder: DriverBinder
) -> BindOutcome:
    """Bind each device's group to vfio-pci, in a worker thread (unbinding the host driver
    waits for it to let go of the GPU)."""
    outcome = BindOutcome()
    for d in sorted(devices, key=lambda d: d.spec.pci_address):
        gpu = scan.gpu(d.spec.pci_address)
        if gpu is None:
            continue
        todo = functions_to_bind(gpu.function, scan, root)
        if isinstance(todo, str):
            if gpu.function.driver != VFIO_DRIVER:
                outcome.refused[gpu.address] = f"{BINDING_REFUSED}: {todo}"
            continue
        if not todo:
            continue
        try:
            for f in todo:
                await asyncio.to_thread(binder.bind, f)
        except BindError as e:
            outcome.refused[gpu.address] = f"{BINDING_REFUSED}: {e}"
            continue
        outcome.done[gpu.address] = [f.address for f in todo]
    return outcome
