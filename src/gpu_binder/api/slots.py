"""The slot resource: the name one GPU of a `pinning: Device` class is served under.

The node agent serves each GPU as a resource of capacity 1, named by its vendor, device
and the slot it holds on its node (DESIGN "Pinning"): gpu.cozystack.io/10de-2330-s3. The
webhook rewrites a VMI's entries to these names, the binder renders them into the
KubeVirt CR and reads them back out of VMIs and pods: one form, written here, for all of
them (the agent may import nothing of the binder, so it lives with the API).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_binder.api.types import GROUP, GPUDevice

# <group>/<vendor>-<device>-s<slot>, the ids as GPUDevices hold them without "0x".
_SLOT = re.compile(rf"^{re.escape(GROUP)}/([0-9a-f]{{4}})-([0-9a-f]{{4}})-s([0-9]+)$")


@dataclass(frozen=True, slots=True)
class Slot:
    """A slot resource's parts: ids without "0x", as the name carries them."""

    vendor: str
    device: str
    slot: int


def format_slot(vendor_id: str, device_id: str, slot: int) -> str:
    """e.g. gpu.cozystack.io/10de-2330-s3, from ids with or without "0x"."""
    return f"{GROUP}/{vendor_id.removeprefix('0x')}-{device_id.removeprefix('0x')}-s{slot}"


def device_slot(d: GPUDevice) -> str:
    """The slot resource serving this device; "" while the agent gave it no slot."""
    if d.spec.slot is None:
        return ""
    return format_slot(d.spec.vendor_id, d.spec.device_id, d.spec.slot)


def parse_slot(name: str) -> Slot | None:
    """The parts of a slot resource; None for any other name."""
    m = _SLOT.match(name)
    return Slot(m[1], m[2], int(m[3])) if m is not None else None


def is_slot(name: str) -> bool:
    """A name of the slot resources, on whichever node."""
    return _SLOT.match(name) is not None
