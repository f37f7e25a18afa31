"""What the plugin reads, in one round of parallel lists, with the caller's rights.

A tenant may not list cluster-scoped GPUDevices or Nodes; what the caller may not read is
left out and said (`forbidden`), and the views fall back on what a tenant can read: the
GPUClasses (readable by every authenticated user through the tenant role), its own VMs,
VMIs and Events, and the devices annotation the binder keeps on its VMs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gpu_binder.api.kinds import Event, resource_of
from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUBindRequest, GPUClass, GPUDevice
from gpu_binder.client.errors import Forbidden, NotFound
from gpu_binder.client.interface import Client
from gpu_binder.kube import KubeClient
from gpu_binder.kube.client import path

X = TypeVar("X")


@dataclass
class Snapshot:
    classes: dict[str, GPUClass] = field(default_factory=dict)
    # None: the caller may not list them.
    devices: list[GPUDevice] | None = None
    nodes: dict[str, Node] | None = None
    vms: dict[str, VirtualMachine] = field(default_factory=dict)
    vmis: dict[str, VirtualMachineInstance] = field(default_factory=dict)
    requests: list[GPUBindRequest] = field(default_factory=list)
    # What could not be read, for a note under the output: "gpudevices", "nodes", ...
    forbidden: list[str] = field(default_factory=list)

    def class_by_resource(self) -> dict[str, GPUClass]:
        return {c.spec.resource_name: c for c in self.classes.values()}

    def devices_on(self, node: str) -> list[GPUDevice]:
        return [d for d in self.devices or () if d.spec.node_name == node]

    def set_of(self, namespace: str, name: str) -> list[GPUDevice]:
        out = []
        for d in self.devices or ():
            b = d.status.binding
            if b is not None and (b.vm.namespace, b.vm.name) == (namespace, name):
                out.append(d)
        return out


async def _allowed(what: str, read: Awaitable[X], forbidden: list[str]) -> X | None:
    try:
        return await read
    except Forbidden:
        forbidden.append(what)
        return None


async def read(
    client: Client,
    namespace: str | None,
    *,
    devices: bool = True,
    nodes: bool = True,
    vms: bool = True,
    requests: bool = False,
) -> Snapshot:
    """The objects the views need: classes always, the rest as asked, VMs and VMIs of one
    namespace or (None) of all."""
    snap = Snapshot()
    f = snap.forbidden

    async def nothing() -> None:
        return None

    def maybe(wanted: bool, what: str, call: Callable[[], Awaitable[X]]) -> Awaitable[X | None]:
        return _allowed(what, call(), f) if wanted else nothing()

    got = await asyncio.gather(
        _allowed("gpuclasses", client.list(GPUClass), f),
        maybe(devices, "gpudevices", lambda: client.list(GPUDevice)),
        maybe(nodes, "nodes", lambda: client.list(Node)),
        maybe(vms, "virtualmachines", lambda: client.list(VirtualMachine, namespace)),
        maybe(
            vms, "virtualmachineinstances", lambda: client.list(VirtualMachineInstance, namespace)
        ),
        maybe(requests, "gpubindrequests", lambda: client.list(GPUBindRequest, namespace)),
    )
    classes, devs, node_list, vm_list, vmi_list, request_list = got
    if classes is not None:
        snap.classes = {c.metadata.name: c for c in classes.items}
    if devs is not None:
        snap.devices = list(devs.items)
    if node_list is not None:
        snap.nodes = {n.name: n for n in node_list.items}
    if vm_list is not None:
        snap.vms = {v.key: v for v in vm_list.items}
    if vmi_list is not None:
        snap.vmis = {v.key: v for v in vmi_list.items}
    if request_list is not None:
        snap.requests = list(request_list.items)
    return snap


async def get_or_none(client: Client, kind: type[X], name: str, namespace: str) -> X | None:
    try:
        found: X = await client.get(kind, name, namespace)  # type: ignore[type-var]
    except NotFound:
        return None
    return found


async def events_about(
    client: Client, namespace: str, name: str, kinds: tuple[str, ...]
) -> list[Event]:
    """Events in namespace about objects of these kinds named name, oldest first.

    Read by field selector, so a namespace with many Events costs one small answer. Events
    the caller may not read (cluster-scoped GPUDevices' go to `default`) are left out.
    """
    try:
        if isinstance(client, KubeClient):
            url = path(resource_of(Event), namespace)
            query = {"fieldSelector": f"regarding.name={name}"}
            answer = await client.request("GET", url, query=query)
            events = [Event.from_dict(raw) for raw in answer.get("items") or ()]
        else:  # the in-memory API of the tests and the demo has no field selectors
            listed = (await client.list(Event, namespace)).items
            events = [e for e in listed if e.regarding.get("name") == name]
    except Forbidden:
        return []
    return sorted((e for e in events if e.regarding.get("kind") in kinds), key=event_time)


def event_time(e: Event) -> str:
    """When it happened: eventTime (RFC 3339, microseconds, Z), else when it was stored."""
    created = e.metadata.creation_timestamp
    return e.event_time or (created.isoformat() if created else "")
