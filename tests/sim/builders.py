"""Objects the MemoryClient tests write, and small changes to them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.meta import OwnerReference
from gpu_binder.api.types import GPUDevice, GPUUsageRecord, Phase
from gpu_binder.client.interface import WatchEvent

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def device(name: str = "n1-0000-3b-00-0", **meta: Any) -> GPUDevice:
    return GPUDevice.model_validate(
        {
            "metadata": {"name": name, **meta},
            "spec": {"nodeName": "n1", "pciAddress": "0000:3b:00.0", "deviceID": "0x2330"},
        }
    )


def vm(name: str = "vm1", namespace: str = "t", **meta: Any) -> VirtualMachine:
    return VirtualMachine.from_dict(
        {"metadata": {"name": name, "namespace": namespace, **meta}, "spec": {"running": True}}
    )


def vmi(name: str = "vm1", namespace: str = "t", **meta: Any) -> VirtualMachineInstance:
    return VirtualMachineInstance.from_dict(
        {"metadata": {"name": name, "namespace": namespace, **meta}, "spec": {}}
    )


def record(name: str = "r1") -> GPUUsageRecord:
    return GPUUsageRecord.model_validate(
        {
            "metadata": {"name": name, "namespace": "t"},
            "spec": {"vm": "vm1", "vmi": {"name": "vm1"}, "device": "d", "start": T0},
        }
    )


def owned_by(owner: Any) -> dict[str, Any]:
    ref = OwnerReference(
        api_version="v1",
        kind=type(owner).__name__,
        name=owner.metadata.name,
        uid=owner.metadata.uid,
    )
    return {"ownerReferences": [ref.to_dict()]}


def with_phase(d: GPUDevice, phase: Phase) -> GPUDevice:
    return d.model_copy(update={"status": d.status.model_copy(update={"phase": phase})})


def with_slot(d: GPUDevice, slot: int) -> GPUDevice:
    return d.model_copy(update={"spec": d.spec.model_copy(update={"slot": slot})})


def with_meta(obj: GPUDevice, **update: Any) -> GPUDevice:
    return obj.model_copy(update={"metadata": obj.metadata.model_copy(update=update)})


async def next_event(stream: AsyncIterator[WatchEvent[Any]]) -> WatchEvent[Any]:
    return await asyncio.wait_for(anext(stream), timeout=1)
