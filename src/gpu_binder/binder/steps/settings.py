"""Settings: the KubeVirt CR's permitted host devices, rendered from classes and slots.

`permittedHostDevices.pciHostDevices` is an atomic list in KubeVirt's schema (no list-map
keys), so a server-side apply replaces it whole. The step therefore writes the list as it
stands with the binder's entries merged in: every entry the binder does not own is kept,
in its order, and the binder's rendered entries follow them, in render order.

Owned (the binder's to add, change and remove) is an entry whose resourceName is
- under `gpu.cozystack.io/`: the slot resources, named in the binder's own API group;
- rendered now: a slot resource in use, or the resourceName of a `Node` class;
- one the binder wrote last time, recorded in the annotation OWNED_ANNOTATION on the CR,
  so the entry of a deleted `Node` class, or of a renamed resourceName, goes with it.
Everything else — NICs, other vendors' devices, a `Device` class's own resourceName (never
rendered: its VMIs are rewritten to slot resources), `mediatedDevices` and the rest of the
configuration, which the step never writes — is the operator's and is left as found.
"""

from __future__ import annotations

from typing import Any

from gpu_binder.api.slots import parse_slot
from gpu_binder.api.types import GROUP
from gpu_binder.binder.context import Context
from gpu_binder.binder.kubevirtcr import CREATED_ANNOTATION, pci_host_devices
from gpu_binder.binder.plan import Note
from gpu_binder.binder.writes import Apply

# Names under the binder's own API group: the slot resources (api.slots) and no others.
SLOT_PREFIX = f"{GROUP}/"
# The resourceNames of the entries the binder wrote, comma-separated, sorted.
OWNED_ANNOTATION = "gpu.cozystack.io/permitted-host-devices"


def render(ctx: Context) -> list[dict[str, Any]]:
    """pciHostDevices: every slot resource in use for Device classes, the class for Node."""
    world = ctx.world
    out: list[dict[str, Any]] = []
    slots = world.devices.slot_users
    for cls in sorted(world.classes.values(), key=lambda c: c.metadata.name):
        vendor = cls.spec.match.vendor_id.removeprefix("0x").upper()
        if cls.spec.pinning == "Node":
            for device_id in cls.spec.match.device_ids or ("*",):
                out.append(
                    {
                        "pciVendorSelector": f"{vendor}:{device_id.removeprefix('0x').upper()}",
                        "resourceName": cls.spec.resource_name,
                        "externalResourceProvider": True,
                    }
                )
            continue
        for resource in sorted(slots):
            slot = parse_slot(resource)
            if slot is None or slot.vendor != vendor.lower():
                continue
            device_id = slot.device
            if cls.spec.match.device_ids and f"0x{device_id}" not in cls.spec.match.device_ids:
                continue
            out.append(
                {
                    "pciVendorSelector": f"{vendor}:{device_id.upper()}",
                    "resourceName": resource,
                    "externalResourceProvider": True,
                }
            )
    return _unique(out)


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item["resourceName"] in seen:
            continue
        seen.add(item["resourceName"])
        out.append(item)
    return out


def merge(have: list[Any], wanted: list[dict[str, Any]], written: str) -> list[Any]:
    """The operator's entries of have, as found, then the binder's wanted entries."""
    # An operator entry named like a Node class is indistinguishable: the binder's wins.
    names = {e["resourceName"] for e in wanted} | {n for n in written.split(",") if n}
    return [*(e for e in have if not _is_owned(e, names)), *wanted]


def _is_owned(entry: Any, names: set[str]) -> bool:
    if not isinstance(entry, dict):
        return False  # not an entry the binder writes: kept as found
    name = entry.get("resourceName")
    return isinstance(name, str) and (name.startswith(SLOT_PREFIX) or name in names)


def settings(ctx: Context) -> None:
    key = f"{ctx.config.kubevirt_namespace}/{ctx.config.kubevirt_name}"
    current = ctx.world.kubevirt.get(key)
    if current is None:
        return  # KubeVirt is not installed, or its CR not yet seen: nothing to render into
    found = pci_host_devices(current)
    have = found or []
    written = current.metadata.annotations.get(OWNED_ANNOTATION, "")
    wanted = render(ctx)
    merged = merge(have, wanted, written)
    record = ",".join(sorted({e["resourceName"] for e in wanted}))
    if merged == have and record == written:
        return  # unchanged: the pass writes nothing (an absent list counts as empty)
    annotations = {OWNED_ANNOTATION: record}
    note: Note | None = None
    if found is None or current.metadata.annotations.get(CREATED_ANNOTATION):
        # A CR with no permittedHostDevices permits every device; the list written now
        # permits only what it lists (binder.kubevirtcr): marked, and said.
        annotations[CREATED_ANNOTATION] = "true"
    if found is None:
        note = Note(
            "KubeVirt",
            current.metadata.namespace,
            current.metadata.name,
            current.metadata.uid,
            "GPUPermittedHostDevicesCreated",
            "gpu-binder created spec.configuration.permittedHostDevices, which this CR did not "
            "have: KubeVirt now permits only the host devices listed there",
            "Warning",
        )
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {
            "name": ctx.config.kubevirt_name,
            "namespace": ctx.config.kubevirt_namespace,
            "annotations": annotations,
        },
        # The whole list, the operator's entries in it: the list is atomic, so the
        # forced apply takes it over, and what it writes is what was there plus ours.
        "spec": {"configuration": {"permittedHostDevices": {"pciHostDevices": merged}}},
    }
    ctx.plan.write(Apply(_Applied(key, body)), note)


class _Applied:
    """A server-side apply body, keyed like the objects the plan keys writes by."""

    def __init__(self, key: str, body: dict[str, Any]) -> None:
        from gpu_binder.api.meta import ObjectMeta

        ns, _, name = key.partition("/")
        self.metadata = ObjectMeta(name=name, namespace=ns)
        self.body = body
