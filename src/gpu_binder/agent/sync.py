"""Keeping one GPUDevice per GPU of the node in step with what the node sees.

`plan` is a pure function from observations and the node's objects to the writes, so
the embedded cluster's agents and the real one decide alike; `apply` performs them
through the client interface. A pass over an unchanged node plans nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpu_binder.agent.discovery import Scan
from gpu_binder.agent.health import assess
from gpu_binder.agent.reset import ResetOutcome
from gpu_binder.agent.slots import assign_slots
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GROUP, GPUDevice, GPUDeviceSpec, Health, device_name
from gpu_binder.client.errors import AlreadyExists, ApiError, NotFound
from gpu_binder.client.interface import Client

# Each agent lists only its node's objects by this label instead of every device.
NODE_LABEL = f"{GROUP}/node"
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True, slots=True)
class Observed:
    """One GPU as its node sees it: everything the agent writes into spec."""

    pci_address: str
    vendor_id: str
    device_id: str
    model: str = ""
    numa_node: int | None = None
    iommu_group: int | None = None
    nvlink_domain: str | None = None
    pcie_switch: str | None = None
    driver: str = ""
    health: Health = Health.HEALTHY
    health_message: str = ""


def observe(scan: Scan, root: Path) -> list[Observed]:
    """The GPUs of a sysfs scan with their health."""
    out = []
    for gpu in scan.gpus:
        f = gpu.function
        verdict = assess(gpu, scan, root)
        out.append(
            Observed(
                pci_address=f.address,
                vendor_id=f.vendor,
                device_id=f.device,
                model=gpu.model,
                numa_node=f.numa_node,
                iommu_group=f.iommu_group,
                nvlink_domain=gpu.nvlink_domain,
                pcie_switch=f.pcie_switch,
                driver=f.driver,
                health=verdict.health,
                health_message=verdict.message,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Plan:
    create: tuple[GPUDevice, ...] = ()
    # Existing objects with their new spec, carrying the resourceVersion they were read at.
    update: tuple[GPUDevice, ...] = ()
    delete: tuple[GPUDevice, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def plan(
    node: str,
    observed: Iterable[Observed],
    existing: Sequence[GPUDevice],
    unreadable: Mapping[str, str] | None = None,
    resets: ResetOutcome | None = None,
    refused: Mapping[str, str] | None = None,
) -> Plan:
    """The writes that make the node's GPUDevices match what it observes.

    `existing` is every GPUDevice of the node. `unreadable` holds the addresses of PCI
    functions that exist but could not be read: their objects are marked Unhealthy,
    not deleted, since a file that cannot be read is not a GPU that is gone. `refused`
    says, per address, why the agent did not bind a GPU to vfio-pci (agent.vfio).
    """
    unreadable = unreadable or {}
    refused = refused or {}
    resets = resets or ResetOutcome()
    mine = [d for d in existing if d.spec.node_name == node]
    by_address = {d.spec.pci_address: d for d in sorted(mine, key=lambda d: d.name)}
    seen = {o.pci_address: o for o in observed}
    slots = assign_slots(seen, {d.spec.pci_address: d.spec.slot for d in mine})

    create: list[GPUDevice] = []
    update: list[GPUDevice] = []
    delete: list[GPUDevice] = []
    for address, o in sorted(seen.items()):
        prev = by_address.get(address)
        health, message = o.health, o.health_message
        for extra in (resets.failed, refused):
            if address in extra:
                health = Health.UNHEALTHY
                message = "; ".join(m for m in (message, extra[address]) if m)
        last_reset = resets.done.get(address) or (prev.spec.last_reset if prev else None)
        # The release a reset cleaned, echoed for the binder (see agent.reset).
        last_reset_for = resets.released.get(address) or (
            prev.spec.last_reset_for if prev else None
        )
        spec = GPUDeviceSpec(
            node_name=node,
            pci_address=address,
            slot=slots[address],
            vendor_id=o.vendor_id,
            device_id=o.device_id,
            model=o.model,
            numa_node=o.numa_node,
            iommu_group=o.iommu_group,
            nvlink_domain=o.nvlink_domain,
            pcie_switch=o.pcie_switch,
            driver=o.driver,
            health=health,
            health_message=message,
            last_reset=last_reset,
            last_reset_for=last_reset_for,
            # An admin's cordon of one device outlives every rescan.
            unschedulable=prev.spec.unschedulable if prev else False,
        )
        if prev is None:
            meta = ObjectMeta(name=device_name(node, address), labels=_labels(node, {}))
            create.append(GPUDevice(metadata=meta, spec=spec))
        elif prev.metadata.deletion_timestamp is not None:
            # Its old object is on its way out; the GPU gets a new one once it is gone.
            continue
        elif spec != prev.spec or prev.metadata.labels != _labels(node, prev.metadata.labels):
            update.append(_with(prev, spec, node))

    for address, d in sorted(by_address.items()):
        if address in seen or d.metadata.deletion_timestamp is not None:
            continue
        if address in unreadable:
            message = f"its sysfs files cannot be read ({unreadable[address]})"
            if d.spec.health != Health.UNHEALTHY or d.spec.health_message != message:
                spec = d.spec.model_copy(
                    update={"health": Health.UNHEALTHY, "health_message": message}
                )
                update.append(_with(d, spec, node))
            continue
        delete.append(d)
    return Plan(tuple(create), tuple(update), tuple(delete))


def _labels(node: str, labels: Mapping[str, str]) -> dict[str, str]:
    out = dict(labels)
    if _LABEL_VALUE.match(node) and len(node) <= 63:
        out[NODE_LABEL] = node
    return out


def _with(d: GPUDevice, spec: GPUDeviceSpec, node: str) -> GPUDevice:
    meta = d.metadata.model_copy(update={"labels": _labels(node, d.metadata.labels)})
    return d.model_copy(update={"spec": spec, "metadata": meta})


def node_selector(node: str) -> str | None:
    """The label selector of the node's GPUDevices; None when the name cannot be a label
    value (longer than 63 characters), and every GPUDevice must be read and filtered."""
    return f"{NODE_LABEL}={node}" if _labels(node, {}) else None


async def list_node_devices(client: Client, node: str) -> list[GPUDevice]:
    """The node's GPUDevices, through the node label when the node name can be one."""
    items = (await client.list(GPUDevice, label_selector=node_selector(node))).items
    return [d for d in items if d.spec.node_name == node]


@dataclass(slots=True)
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # Writes that failed, in words; the next pass tries again from a fresh read.
    errors: list[str] = field(default_factory=list)
    # The node's objects after the writes, as the API answered them.
    devices: list[GPUDevice] = field(default_factory=list)


# Told of every write as soon as it returns: (name, the object written, None for a delete).
WriteHook = Callable[[str, GPUDevice | None], None]


def _ignore(name: str, written: GPUDevice | None) -> None:
    pass


async def apply(
    client: Client,
    node: str,
    p: Plan,
    existing: Sequence[GPUDevice],
    on_write: WriteHook = _ignore,
) -> SyncReport:
    report = SyncReport()
    current = {d.name: d for d in existing if d.spec.node_name == node}
    for d in p.create:
        try:
            current[d.name] = written = await client.create(d)
            on_write(d.name, written)
            report.created.append(d.name)
        except AlreadyExists:
            # An object the label did not find (made by hand, or before the label
            # existed): adopt it by writing our spec over its current version.
            try:
                found = await client.get(GPUDevice, d.name)
                current[d.name] = written = await client.update(_with(found, d.spec, node))
                on_write(d.name, written)
                report.updated.append(d.name)
            except ApiError as e:
                report.errors.append(f"adopting {d.name}: {e.message}")
        except ApiError as e:
            report.errors.append(f"creating {d.name}: {e.message}")
    for d in p.update:
        try:
            current[d.name] = written = await client.update(d)
            on_write(d.name, written)
            report.updated.append(d.name)
        except NotFound:
            current.pop(d.name, None)
        except ApiError as e:
            report.errors.append(f"updating {d.name}: {e.message}")
    for d in p.delete:
        try:
            await client.delete(GPUDevice, d.name)
            on_write(d.name, None)
            report.deleted.append(d.name)
            current.pop(d.name, None)
        except NotFound:
            current.pop(d.name, None)
        except ApiError as e:
            report.errors.append(f"deleting {d.name}: {e.message}")
    report.devices = sorted(current.values(), key=lambda d: d.name)
    return report
