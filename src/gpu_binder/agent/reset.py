"""Function-level reset of released GPUs, so no tenant finds the last one's memory.

The agent resets its node's devices in phase Cleaning through sysfs and then records
`spec.lastReset` (when, by the node's clock) and `spec.lastResetFor`: the
`status.releasedAt` it saw before the reset, copied verbatim. The binder ends Cleaning
only when lastResetFor equals releasedAt, its own timestamp echoed back, so no clocks of
two machines are compared: a reset made for an earlier release never passes for this
one, and a reset for this one is never repeated. A device whose reset fails is reported
Unhealthy and keeps being retried while nothing uses it, so it is never handed on dirty.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from gpu_binder.agent.discovery import Scan
from gpu_binder.agent.health import VFIO_DRIVER
from gpu_binder.agent.pci import PCI_DEVICES, shown
from gpu_binder.api.meta import utc
from gpu_binder.api.types import GPUDevice, Phase

# Health messages of a failed reset start with this, so a restarted agent remembers them.
RESET_FAILED = "function-level reset failed"


class ResetError(Exception):
    """The device could not be reset; the message says why, in words."""


class Resetter(Protocol):
    def reset(self, address: str) -> None:
        """Reset one PCI function; ResetError when it cannot be done."""
        ...


@dataclass(frozen=True, slots=True)
class SysfsResetter:
    """Writes 1 to /sys/bus/pci/devices/<address>/reset, the kernel's reset entry point."""

    root: Path

    def reset(self, address: str) -> None:
        path = self.root / PCI_DEVICES / address / "reset"
        if not path.exists():
            raise ResetError("the device offers no reset method (sysfs has no reset file)")
        try:
            with open(path, "w") as f:
                f.write("1")
        except OSError as e:
            raise ResetError(f"writing {shown(self.root, path)}: {e.strerror or e}") from None


@dataclass(slots=True)
class ResetOutcome:
    # address -> when the reset was made, by the node's clock (spec.lastReset).
    done: dict[str, datetime] = field(default_factory=dict)
    # address -> the status.releasedAt seen before the reset (spec.lastResetFor); absent
    # for a reset of a device that names no release.
    released: dict[str, datetime] = field(default_factory=dict)
    # address -> health message of the failure.
    failed: dict[str, str] = field(default_factory=dict)


def wants_reset(device: GPUDevice) -> bool:
    """A Cleaning device not reset for its current release, with no VMI on it.

    Whether it was is told by lastResetFor, never by comparing lastReset with releasedAt:
    a lastReset-only record of an older agent brings one more reset, which is harmless.
    """
    status = device.status
    if status.phase != Phase.CLEANING or status.attachment is not None:
        return False
    released = status.released_at
    if released is None:
        return device.spec.last_reset is None
    echoed = device.spec.last_reset_for
    return echoed is None or utc(echoed) != utc(released)


def remembered_failures(devices: Iterable[GPUDevice]) -> dict[str, str]:
    """Failed resets the API still shows, so an agent restart does not forget them."""
    out = {}
    for d in devices:
        # The failure is the last reason of the message, after any the scan gave.
        at = d.spec.health_message.find(RESET_FAILED)
        if at >= 0:
            out[d.spec.pci_address] = d.spec.health_message[at:]
    return out


def candidates(
    devices: Iterable[GPUDevice],
    scan: Scan,
    failed: Mapping[str, str],
    node_pinned: Collection[str] = (),
) -> list[GPUDevice]:
    """Devices to reset now: wanted ones, and earlier failures that nothing holds.

    Only a GPU that is present and bound to vfio-pci is reset: resetting under a host
    driver would pull the device from under it, and such a GPU is Unhealthy anyway.
    A GPU of a `pinning: Node` class (`node_pinned`) waits while a VMI of its class runs
    on the node: another plugin hands out that class's GPUs by count, so the one released
    may be the one that VMI got (cleaning is exact per node in that mode, DESIGN §1).
    """
    devices = list(devices)
    busy = {
        d.status.class_name
        for d in devices
        if d.status.class_name in node_pinned and d.status.attachment is not None
    }
    out = []
    for d in devices:
        gpu = scan.gpu(d.spec.pci_address)
        if gpu is None or gpu.function.driver != VFIO_DRIVER:
            continue
        if d.status.class_name in busy:
            continue
        idle = d.status.attachment is None and d.status.binding is None
        if wants_reset(d) or (d.spec.pci_address in failed and idle):
            out.append(d)
    return out


async def reset_devices(
    devices: Iterable[GPUDevice], resetter: Resetter, clock: Callable[[], datetime]
) -> ResetOutcome:
    """Reset each device in a worker thread (the kernel blocks for the reset's duration).

    Each success records the releasedAt the device showed before its reset: that release
    is the one the reset cleaned.
    """
    outcome = ResetOutcome()
    released = {d.spec.pci_address: d.status.released_at for d in devices}

    async def one(address: str) -> None:
        try:
            await asyncio.to_thread(resetter.reset, address)
        except ResetError as e:
            outcome.failed[address] = (
                f"{RESET_FAILED}: {e}; it stays out of use until a reset succeeds"
            )
        else:
            outcome.done[address] = clock()
            if (at := released[address]) is not None:
                outcome.released[address] = at

    await asyncio.gather(*(one(a) for a in sorted(released)))
    return outcome
