"""Device histories written into the store as the binder, agent and kubelet would write them."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from gpu_binder.api.kinds import Event
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    DEVICES_ANNOTATION,
    GPUDevice,
    GPUUsageRecord,
    Phase,
    usage_record_name,
)
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.kubelet import with_phase
from gpu_binder.sim.memory import MemoryClient

_names = itertools.count()


class History:
    """Writes a device history into the store the way the binder, agent and kubelet would."""

    def __init__(self, store: MemoryClient, clock: VirtualClock) -> None:
        self.store, self.clock = store, clock

    def device(self, name: str, node: str = "n1", slot: int = 0) -> GPUDevice:
        return self.store.put(
            GPUDevice.model_validate(
                {
                    "metadata": {"name": name},
                    "spec": {
                        "nodeName": node,
                        "pciAddress": f"0000:{0x10 + slot:02x}:00.0",
                        "deviceID": "0x2330",
                        "slot": slot,
                    },
                    "status": {"className": "h100", "phase": "Available"},
                }
            )
        )

    def status(self, name: str, note: bool = True, **update: Any) -> GPUDevice:
        d = self.store.peek(GPUDevice, name)
        assert d is not None
        new = self.store.put(d.model_copy(update={"status": d.status.model_copy(update=update)}))
        if note:
            self.event("", name)
        return new

    def bind(self, name: str, vm: str, note: bool = True) -> GPUDevice:
        ns, _, vm_name = vm.partition("/")
        binding = {
            "vm": {"namespace": ns, "name": vm_name},
            "boundAt": self.clock.now(),
            "reason": "Order",
        }
        d = self.store.peek(GPUDevice, name)
        assert d is not None
        status = d.status.model_validate(
            {**d.status.to_dict(), "binding": binding, "phase": "Bound"}
        )
        new = self.store.put(d.model_copy(update={"status": status}))
        if note:
            self.event(ns, vm_name)
        return new

    def release(self, name: str, phase: Phase = Phase.CLEANING) -> GPUDevice:
        return self.status(
            name, binding=None, attachment=None, phase=phase, released_at=self.clock.now()
        )

    def reset(self, name: str) -> GPUDevice:
        self.clock.advance(1)
        d = self.store.peek(GPUDevice, name)
        assert d is not None
        self.store.put(
            d.model_copy(
                update={"spec": d.spec.model_copy(update={"last_reset": self.clock.now()})}
            )
        )
        return self.status(name, note=False, phase=Phase.AVAILABLE)

    def event(self, namespace: str, name: str) -> None:
        self.store.put(
            Event(
                metadata=ObjectMeta(name=f"e{next(_names)}", namespace=namespace or "default"),
                regarding={"namespace": namespace, "name": name},
                reason="Test",
                note="",
            )
        )

    def run(self, vm: str, node: str, *devices: str) -> VirtualMachineInstance:
        ns, _, name = vm.partition("/")
        raw = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"uid-{name}-{next(_names)}",
                "annotations": {DEVICES_ANNOTATION: ",".join(devices)},
            },
            "spec": {},
        }
        vmi = VirtualMachineInstance.from_dict(raw)
        return self.store.put(with_phase(vmi, "Running", self.clock.now(), node=node))

    def end(self, vmi: VirtualMachineInstance) -> VirtualMachineInstance:
        self.clock.advance(1)
        current = self.store.peek(VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace)
        assert current is not None
        return self.store.put(with_phase(current, "Succeeded", self.clock.now()))

    def attach(self, name: str, vmi: VirtualMachineInstance, record: bool = True) -> None:
        ref = {
            "namespace": vmi.metadata.namespace,
            "name": vmi.metadata.name,
            "uid": vmi.metadata.uid,
        }
        d = self.store.peek(GPUDevice, name)
        assert d is not None
        status = d.status.model_validate(
            {
                **d.status.to_dict(),
                "attachment": {"vmi": ref, "since": self.clock.now()},
                "phase": "Attached",
            }
        )
        self.store.put(d.model_copy(update={"status": status}))
        if record:
            self.record(vmi, name)

    def detach(self, name: str, vmi: VirtualMachineInstance, end: datetime | None = None) -> None:
        self.status(name, note=False, attachment=None, phase=Phase.BOUND)
        r = self.store.peek(
            GPUUsageRecord, usage_record_name(vmi.metadata.uid, name), vmi.metadata.namespace
        )
        if r is not None:
            finished = end or vmi.finished_at or self.clock.now()
            self.store.put(
                r.model_copy(update={"spec": r.spec.model_copy(update={"end": finished})})
            )

    def record(self, vmi: VirtualMachineInstance, device: str) -> GPUUsageRecord:
        return self.store.put(
            GPUUsageRecord.model_validate(
                {
                    "metadata": {
                        "name": usage_record_name(vmi.metadata.uid, device),
                        "namespace": vmi.metadata.namespace,
                    },
                    "spec": {
                        "vm": vmi.metadata.name,
                        "vmi": {"name": vmi.metadata.name, "uid": vmi.metadata.uid},
                        "device": device,
                        "start": self.clock.now(),
                    },
                }
            )
        )
