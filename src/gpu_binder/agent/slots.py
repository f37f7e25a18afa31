"""Stable slot numbers per node (the name they are served under: api.slots).

A slot lives as long as its GPUDevice: the API is the memory, so an agent restart or a
rescan gives every GPU the slot it had, and a new GPU takes the lowest free one
(DESIGN "Pinning").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def assign_slots(present: Iterable[str], existing: Mapping[str, int | None]) -> dict[str, int]:
    """Slots for the present PCI addresses, given the slots the node's GPUDevices hold.

    `existing` maps the address of every GPUDevice of the node, present or vanished, to
    its slot; a vanished GPU's object still holds its slot until it is deleted, because a
    VM may still name that slot resource.
    """
    present = sorted(set(present))
    slots: dict[str, int] = {}
    taken: set[int] = set()
    # Two objects claiming one slot is damage; the lower address keeps it.
    for address in sorted(existing):
        slot = existing[address]
        if slot is None or slot < 0 or slot in taken:
            continue
        taken.add(slot)
        if address in present:
            slots[address] = slot
    free = 0
    for address in present:
        if address in slots:
            continue
        while free in taken:
            free += 1
        slots[address] = free
        taken.add(free)
    return slots


def pci_resource_env(resource: str) -> str:
    """The variable KubeVirt reads a PCI external provider's addresses from.

    KubeVirt's ResourceNameToEnvVar upper-cases and turns only `/` and `.` into `_`, so
    the dashes of a slot resource stay: PCI_RESOURCE_GPU_COZYSTACK_IO_10DE-2330-S3.
    """
    return "PCI_RESOURCE_" + resource.upper().replace("/", "_").replace(".", "_")
