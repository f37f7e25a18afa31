"""Recording decisions as events.k8s.io/v1 Events on the VM or device they concern."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from gpu_binder.api.kinds import Event
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.binder.plan import Decision, Note
from gpu_binder.client.interface import Client

API_VERSIONS = {
    "VirtualMachine": "kubevirt.io/v1",
    "VirtualMachineInstance": "kubevirt.io/v1",
    "GPUDevice": "gpu.cozystack.io/v1alpha1",
    "GPUBindRequest": "gpu.cozystack.io/v1alpha1",
    "GPUClass": "gpu.cozystack.io/v1alpha1",
    "KubeVirt": "kubevirt.io/v1",
    "ResourceQuota": "v1",
}


def merge(notes: list[Note]) -> list[Note]:
    """One Event per decision: the devices of one bind or release named together."""
    groups: dict[tuple[object, ...], list[str]] = {}
    firsts: dict[tuple[object, ...], tuple[Note, Decision]] = {}
    order: list[tuple[object, ...] | int] = []
    for i, n in enumerate(notes):
        d = n.decision
        if d is None:
            order.append(i)
            continue
        key = (n.kind, n.namespace, n.name, n.reason, n.type, d.verb, d.node, d.why)
        if key not in groups:
            groups[key] = []
            firsts[key] = (n, d)
            order.append(key)
        groups[key].extend(d.devices)
    out: list[Note] = []
    for k in order:
        if isinstance(k, int):
            out.append(notes[k])
            continue
        first, decision = firsts[k]
        out.append(replace(first, decision=replace(decision, devices=tuple(groups[k]))))
    return out


class Recorder(Protocol):
    async def record(self, note: Note, now: datetime) -> None: ...


# An Event's action: what the binder did (or failed to do) about the object, per reason.
ACTIONS = {
    "GPUOrder": "Bind",
    "GPURequest": "Bind",
    "GPUMove": "Move",
    "GPUMoveBlocked": "Move",
    "GPURebind": "Rebind",
    "GPURebindBlocked": "Rebind",
    "GPUAdopted": "Adopt",
    "GPUUnmanaged": "Adopt",
    "GPUReleased": "Release",
    "GPUReleasing": "Release",
    "GPURefused": "Refuse",
    "GPUUnplaceable": "Place",
    "GPUMadeRoom": "Defragment",
    "GPULost": "MarkLost",
    "GPURecovered": "Recover",
    "GPUDegraded": "MarkDegraded",
    "GPUDrainBlocked": "BlockDrain",
    "GPUClassRefused": "Refuse",
    "GPUPermittedHostDevicesCreated": "Configure",
    "GPUQuotaExceeded": "Bind",
    "GPUQuotaMalformed": "ReadQuota",
}


class ClientRecorder:
    """Writes each note as an Event through the client; cluster-scoped ones go to `default`.
    It keeps none: a binder's notes are as many as its decisions over its lifetime."""

    def __init__(self, client: Client, instance: str = "gpu-binder") -> None:
        self.client = client
        self.instance = instance
        self._seq = itertools.count(1)

    async def record(self, note: Note, now: datetime) -> None:
        namespace = note.namespace or "default"
        name = f"{note.name}.{int(now.timestamp() * 1e6):x}{next(self._seq):x}"
        event = Event(
            metadata=ObjectMeta(name=name[:253], namespace=namespace),
            regarding={
                "apiVersion": API_VERSIONS.get(note.kind, "v1"),
                "kind": note.kind,
                "namespace": note.namespace,
                "name": note.name,
                "uid": note.uid,
            },
            reason=note.reason,
            note=note.message[:1024],
            type=note.type,
            action=ACTIONS.get(note.reason, "Bind"),
            event_time=now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            reporting_instance=self.instance,
        )
        await self.client.create(event)


class MemoryRecorder:
    """Keeps notes in a list: for benchmarks and tests that look only at decisions."""

    def __init__(self) -> None:
        self.recorded: list[Note] = []

    async def record(self, note: Note, now: datetime) -> None:
        self.recorded.append(note)
