"""DataVolumes on a WaitForFirstConsumer storage class: CDI and the CSI driver in one.

A VMI whose volumes name a DataVolume still waiting for its first consumer gets a
temporary pod from KubeVirt first (lifecycle.go: `areDataVolumesReady` reports
WaitForFirstConsumer, `sync` renders the pod with `RenderLaunchManifestNoVm`). Once that
pod has a node the claim binds, the DataVolume leaves WaitForFirstConsumer and populates,
and is ready `populate_seconds` later; only then does KubeVirt render the virt-launcher
pod. The volume's node affinity (a local volume binds to the consumer's node) is not
modelled: the storage here reaches every node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class VolumeState:
    # A DataVolume of the VMI waits for its first consumer.
    waiting: bool
    # Every DataVolume of the VMI is populated.
    ready: bool
    # When the last one still populating is ready (None: none is).
    ready_at: datetime | None = None


READY = VolumeState(waiting=False, ready=True)


class Storage:
    def __init__(self, clock: Callable[[], datetime], populate_seconds: float = 30.0) -> None:
        self.clock = clock
        self.populate = timedelta(seconds=populate_seconds)
        self._waiting: set[str] = set()
        self._ready_at: dict[str, datetime] = {}

    def add_waiting(self, namespace: str, name: str) -> None:
        """A new DataVolume on a WaitForFirstConsumer class (forgetting any of the name)."""
        key = f"{namespace}/{name}"
        self._waiting.add(key)
        self._ready_at.pop(key, None)

    def state(self, vmi_raw: dict[str, Any]) -> VolumeState:
        keys = data_volumes(vmi_raw)
        if not keys:
            return READY
        now = self.clock()
        waiting = any(k in self._waiting for k in keys)
        later = [t for k in keys if (t := self._ready_at.get(k)) is not None and t > now]
        return VolumeState(
            waiting=waiting,
            ready=not waiting and not later,
            ready_at=max(later) if later else None,
        )

    def consumer_scheduled(self, vmi_raw: dict[str, Any]) -> None:
        """A pod using the VMI's volumes got a node: the waiting claims bind and populate."""
        now = self.clock()
        for key in data_volumes(vmi_raw):
            if key in self._waiting:
                self._waiting.discard(key)
                self._ready_at[key] = now + self.populate


def data_volumes(vmi_raw: dict[str, Any]) -> list[str]:
    """The namespace/name of every DataVolume the VMI's volumes name."""
    meta = vmi_raw.get("metadata") or {}
    namespace = meta.get("namespace", "")
    out = []
    for volume in (vmi_raw.get("spec") or {}).get("volumes") or ():
        dv = volume.get("dataVolume") if isinstance(volume, dict) else None
        if isinstance(dv, dict) and dv.get("name"):
            out.append(f"{namespace}/{dv['name']}")
    return out
