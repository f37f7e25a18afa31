"""Which of a set's devices each GPU entry of a starting VMI gets (DESIGN "Pinning").

An entry names either a class's resourceName (the order) or a slot resource (one GPU on
whatever node the VMI lands on). Slot names repeat on every node, so a slot entry is the
VMI's own only when its set holds that slot and the VMI is pinned to the set's node.
What an entry names is cache.vmiorder's rule, the one the binder reads running VMIs by.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpu_binder.api.slots import device_slot, is_slot
from gpu_binder.api.types import GPUClass, GPUDevice
from gpu_binder.cache.vmiorder import resolve, slots_of
from gpu_binder.placement.options import serving

Section = Literal["gpus", "hostDevices"]
SECTIONS: tuple[Section, ...] = ("gpus", "hostDevices")


@dataclass(frozen=True, slots=True)
class Entry:
    """One element of spec.domain.devices.gpus[] or hostDevices[]."""

    section: Section
    index: int
    device_name: str


def gpu_entries(vmi: Mapping[str, Any]) -> list[Entry]:
    """The VMI's device entries that name a device, in spec order; cheap on a VMI without."""
    spec = vmi.get("spec")
    domain = spec.get("domain") if isinstance(spec, dict) else None
    devices = domain.get("devices") if isinstance(domain, dict) else None
    if not isinstance(devices, dict):
        return []
    out: list[Entry] = []
    for section in SECTIONS:
        items = devices.get(section)
        if not isinstance(items, list):
            continue
        for i, item in enumerate(items):
            if isinstance(item, dict) and isinstance(name := item.get("deviceName"), str):
                out.append(Entry(section, i, name))
    return out


def slot_resource_limits(vmi: Mapping[str, Any]) -> list[str]:
    """Slot resources named in spec.domain.resources, which reach the launcher pod as is.

    No VMI needs them there: the webhook pins through device entries alone, so any such
    name is a way around the pinning.
    """
    spec = vmi.get("spec")
    domain = spec.get("domain") if isinstance(spec, dict) else None
    resources = domain.get("resources") if isinstance(domain, dict) else None
    if not isinstance(resources, dict):
        return []
    out: list[str] = []
    for field in ("requests", "limits"):
        names = resources.get(field)
        if isinstance(names, dict):
            out.extend(n for n in names if isinstance(n, str) and is_slot(n))
    return sorted(set(out))


@dataclass(frozen=True, slots=True)
class Order:
    """What a VMI asks for: entries per class it names, and the slot entries it names."""

    by_class: dict[str, list[Entry]]
    slots: list[Entry]

    def __bool__(self) -> bool:
        return bool(self.by_class or self.slots)


def order_of(entries: Iterable[Entry], classes: Mapping[str, GPUClass]) -> Order:
    """Split entries by what they name; entries naming neither are not the binder's."""
    by_class: dict[str, list[Entry]] = {}
    slots: list[Entry] = []
    for e in entries:
        cls = classes.get(e.device_name)
        if cls is not None:
            by_class.setdefault(cls.metadata.name, []).append(e)
        elif is_slot(e.device_name):
            slots.append(e)
    return Order(by_class, slots)


def with_alternatives(
    order: Order, alternatives: Collection[str], devices: Sequence[GPUDevice]
) -> Order:
    """The order as the set serves it, when the VM accepts several classes.

    Entries naming any of the interchangeable classes (placement.options) are one group
    that one class serves: the one the set holds most devices of, if it holds any. So an
    entry naming h100's resourceName gets an a100 of a set the binder bound from a100.
    """
    named = [c for c in order.by_class if c in alternatives]
    if not named or len(set(alternatives)) < 2:
        return order
    held = Counter(d.status.class_name for d in devices)
    chosen = serving(alternatives, held)
    if chosen is None:
        return order
    by_class = {c: es for c, es in order.by_class.items() if c not in alternatives}
    by_class[chosen] = sorted(
        (e for c in named for e in order.by_class[c]), key=lambda e: (e.section, e.index)
    )
    return Order(by_class, order.slots)


def held_by(d: GPUDevice, key: str, uid: str) -> bool:
    """Whether d is bound to the order with this key and uid. A uid either side does not
    know (a standalone VMI's set bound before the API server named the VMI) does not
    refuse; two that differ do: a VM recreated under the name is another order."""
    b = d.status.binding
    if b is None or b.vm.key != key:
        return False
    return not (uid and b.vm.uid and b.vm.uid != uid)


def by_slot(devices: Iterable[GPUDevice]) -> list[GPUDevice]:
    """Slot order, so the n-th entry always gets the same GPU of a given set."""
    return sorted(devices, key=lambda d: (d.spec.slot is None, d.spec.slot or 0, d.metadata.name))


def foreign_slots(order: Order, devices: Sequence[GPUDevice]) -> list[str]:
    """Slot resources the VMI names that its set does not hold (each held once)."""
    return list(resolve((e.device_name for e in order.slots), {}, slots_of(devices)).unresolved)


def counts(order: Order, devices: Sequence[GPUDevice]) -> dict[str, int]:
    """GPUs per class the VMI needs: its class entries plus the set's GPUs its slots name."""
    out = {c: len(es) for c, es in order.by_class.items()}
    slots = resolve((e.device_name for e in order.slots), {}, slots_of(devices))
    for c, n in slots.order.items():
        out[c] = out.get(c, 0) + n
    return out


@dataclass(frozen=True, slots=True)
class Pinning:
    """The admitted VMI's GPUs: its node, its devices, and the entries rewritten to slots."""

    node: str
    devices: tuple[str, ...]
    rewrites: tuple[tuple[Entry, str], ...]


@dataclass(frozen=True, slots=True)
class Incomplete:
    """The set cannot serve the order yet: the binder must complete it."""

    reason: str


@dataclass(frozen=True, slots=True)
class Refused:
    """The order can never be served this way: the VMI is denied."""

    message: str


def pin(
    order: Order, devices: Sequence[GPUDevice], classes: Mapping[str, GPUClass]
) -> Pinning | Incomplete | Refused:
    """Give each entry of the order one distinct device of the set, on the set's one node.

    `devices` is the set without its Lost devices; `classes` maps class name to class.
    """
    nodes = {d.spec.node_name for d in devices}
    if len(nodes) > 1:
        return Incomplete(f"the set spans nodes {', '.join(sorted(nodes))}")
    node = next(iter(nodes), "")
    devices = by_slot(devices)
    used: set[str] = set()
    chosen: list[GPUDevice] = []
    for e in order.slots:
        d = next(
            (d for d in devices if d.metadata.name not in used and device_slot(d) == e.device_name),
            None,
        )
        if d is None:
            return Refused(foreign_message([e.device_name]))
        used.add(d.metadata.name)
        chosen.append(d)
    rewrites: list[tuple[Entry, str]] = []
    for class_name, entries in sorted(order.by_class.items()):
        free = [
            d for d in devices if d.status.class_name == class_name and d.metadata.name not in used
        ]
        if len(free) < len(entries):
            have = f"{len(free)} of {len(entries)} × {class_name}"
            return Incomplete(f"the set holds {have}")
        cls = classes.get(class_name)
        device_pinned = cls is None or cls.spec.pinning == "Device"
        for e, d in zip(entries, free, strict=False):
            used.add(d.metadata.name)
            chosen.append(d)
            if not device_pinned:
                # Another plugin serves the class by count on the node; an entry naming
                # another class (an alternative the set does not hold) must name this one.
                if cls is not None and e.device_name != cls.spec.resource_name:
                    rewrites.append((e, cls.spec.resource_name))
                continue
            slot = device_slot(d)
            if not slot:
                return Refused(
                    f"GPU {d.metadata.name} on {d.spec.node_name} has no slot yet: its node "
                    "agent has not served it; KubeVirt will retry"
                )
            rewrites.append((e, slot))
    return Pinning(node, tuple(sorted(d.metadata.name for d in chosen)), tuple(rewrites))


def foreign_message(names: Sequence[str]) -> str:
    """Why a VMI naming slot resources outside its set is denied, in a tenant's words."""
    listed = ", ".join(sorted(set(names)))
    return (
        f"the VMI names slot resource {listed}, which is not one of its VM's GPUs; "
        "name the GPU class's resourceName instead: no tenant can reach another's GPU"
    )
