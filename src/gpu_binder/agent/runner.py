"""One agent on one node: scan, reset, sync, serve — on a timer, and when woken.

A running agent watches its node's GPUDevices (by the node label) and the GPUClasses
(agent/watch.py): a change it did not make itself (a GPU entering Cleaning, a class
assigned, an object deleted) wakes a pass at once, as does SIGHUP. The timer rescans
sysfs, which has no events to watch; such a pass reads the watched objects from memory
and writes only what changed, so an unchanged node costs the API server nothing. A
single pass (`run_pass` outside `run`, `gpu-binder agent --once`) lists instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpu_binder.agent.deviceplugin import DevicePluginManager, SlotDevice
from gpu_binder.agent.discovery import Scan, scan
from gpu_binder.agent.models import NVIDIA
from gpu_binder.agent.pci import SysfsError
from gpu_binder.agent.reset import (
    ResetOutcome,
    Resetter,
    SysfsResetter,
    candidates,
    remembered_failures,
    reset_devices,
)
from gpu_binder.agent.sync import (
    SyncReport,
    apply,
    list_node_devices,
    node_selector,
    observe,
    plan,
)
from gpu_binder.agent.vfio import (
    BindOutcome,
    DriverBinder,
    SysfsDriverBinder,
    bind_devices,
)
from gpu_binder.agent.vfio import (
    candidates as bind_candidates,
)
from gpu_binder.agent.watch import Watched
from gpu_binder.api.slots import format_slot
from gpu_binder.api.types import GPUClass, GPUDevice, Health
from gpu_binder.client.errors import ApiError
from gpu_binder.client.interface import Client

log = logging.getLogger(__name__)

# Seconds a pass waits for the watch to show the agent's last writes before it lists.
FRESH_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node: str
    root: Path = Path("/")
    # Seconds between rescans of sysfs; SIGHUP and watched changes pass at once.
    interval: float = 10.0
    # Seconds between fresh lists of the watched objects, a safety net under the watches.
    resync: float = 300.0
    # PCI vendors to discover; empty: those the classes name, NVIDIA when there are none.
    vendors: tuple[str, ...] = ()


@dataclass(slots=True)
class PassReport:
    notes: list[str] = field(default_factory=list)
    bindings: BindOutcome = field(default_factory=BindOutcome)
    resets: ResetOutcome = field(default_factory=ResetOutcome)
    sync: SyncReport = field(default_factory=SyncReport)
    served: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        s = self.sync
        return bool(s.created or s.updated or s.deleted or self.resets.done or self.bindings.done)


def vendors_of(classes: Sequence[GPUClass], configured: Sequence[str]) -> tuple[str, ...]:
    if configured:
        return tuple(sorted({v.lower() for v in configured}))
    return tuple(sorted({c.spec.match.vendor_id for c in classes})) or (NVIDIA,)


def slot_devices(
    devices: Sequence[GPUDevice], present: set[str], classes: Sequence[GPUClass]
) -> list[SlotDevice]:
    """The devices served as slot resources: present ones of a `pinning: Device` class.

    The binder's classification (status.className) decides, so a GPU of a `Node` class
    is never also offered under a slot resource by this plugin.
    """
    pinned = {c.metadata.name for c in classes if c.spec.pinning == "Device"}
    out = []
    for d in devices:
        s = d.spec
        if s.pci_address not in present or s.slot is None or d.status.class_name not in pinned:
            continue
        out.append(
            SlotDevice(
                resource=format_slot(s.vendor_id, s.device_id, s.slot),
                pci_address=s.pci_address,
                healthy=s.health == Health.HEALTHY,
                numa_node=s.numa_node,
                iommu_group=s.iommu_group,
                message=s.health_message,
            )
        )
    return out


class NodeAgent:
    def __init__(
        self,
        config: AgentConfig,
        client: Client,
        *,
        plugins: DevicePluginManager | None = None,
        resetter: Resetter | None = None,
        binder: DriverBinder | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.client = client
        self.plugins = plugins
        self.resetter = resetter or SysfsResetter(config.root)
        self.binder = binder or SysfsDriverBinder(config.root)
        self.clock = clock
        self.wake = asyncio.Event()
        # Passes completed.
        self.passes = 0
        # While `run` runs: the node's GPUDevices and the GPUClasses, watched.
        self.devices: Watched[GPUDevice] | None = None
        self.classes: Watched[GPUClass] | None = None
        self._classes: list[GPUClass] = []
        self._notes: list[str] = []
        # Refused bindings already logged: said once, not at every rescan.
        self._refusals: dict[str, str] = {}

    async def run_pass(self) -> PassReport:
        """One scan-reset-sync-serve pass; SysfsError when sysfs cannot be listed at all."""
        node, root = self.config.node, self.config.root
        await self._read_classes()
        found: Scan = await asyncio.to_thread(
            scan, root, vendors_of(self._classes, self.config.vendors)
        )
        report = PassReport(notes=found.notes())
        existing = await self._read_devices()

        # Binding first: a GPU the agent moves to vfio-pci is reported Healthy, and reset
        # when it is cleaning, in this same pass.
        to_bind = bind_candidates(existing, found, self._classes)
        report.bindings = await bind_devices(to_bind, found, root, self.binder)
        if report.bindings.done:
            found = await asyncio.to_thread(
                scan, root, vendors_of(self._classes, self.config.vendors)
            )

        failures = remembered_failures(existing)
        by_node = {c.metadata.name for c in self._classes if c.spec.pinning == "Node"}
        todo = candidates(existing, found, failures, by_node)
        report.resets = await reset_devices(todo, self.resetter, self.clock)
        for address, message in failures.items():
            # A failure not retried this pass still stands until a reset succeeds.
            if address not in report.resets.done:
                report.resets.failed.setdefault(address, message)

        observed = observe(found, root)
        p = plan(node, observed, existing, found.unreadable, report.resets, report.bindings.refused)
        report.sync = await apply(self.client, node, p, existing, self._wrote)
        if self.plugins is not None:
            present = {o.pci_address for o in observed}
            served = slot_devices(report.sync.devices, present, self._classes)
            await self.plugins.update(served)
            report.served = sorted(s.resource for s in served)
        self.passes += 1
        return report

    async def _read_classes(self) -> None:
        if self.classes is not None and self.classes.live:
            self._classes = self.classes.items()
            return
        try:
            self._classes = (await self.client.list(GPUClass)).items
        except ApiError as e:
            log.warning("cannot read GPUClasses (%s); using the last ones seen", e.message)

    async def _read_devices(self) -> list[GPUDevice]:
        """The node's GPUDevices: the watched ones once they hold the agent's own writes."""
        node = self.config.node
        if self.devices is not None and await self.devices.wait_fresh(FRESH_TIMEOUT):
            return self.devices.items()
        return await list_node_devices(self.client, node)

    def _wrote(self, name: str, written: GPUDevice | None) -> None:
        if self.devices is not None:
            self.devices.expect(name, written)

    async def run(self, stop: asyncio.Event) -> None:
        """Pass after pass until stop is set; a failed pass is logged and retried."""
        node = self.config.node
        self.devices = Watched(
            self.client,
            GPUDevice,
            self.wake.set,
            label_selector=node_selector(node),
            keep=lambda d: d.spec.node_name == node,
            resync=self.config.resync,
        )
        self.classes = Watched(self.client, GPUClass, self.wake.set, resync=self.config.resync)
        watches = [
            asyncio.create_task(w.run(), name=f"agent-watch-{w.name}")
            for w in (self.devices, self.classes)
        ]
        watchdog = None
        if self.plugins is not None:
            watchdog = asyncio.create_task(self.plugins.watch(stop))
        try:
            while not stop.is_set():
                await self._logged_pass()
                waits = [asyncio.create_task(e.wait()) for e in (stop, self.wake)]
                await asyncio.wait(
                    waits, timeout=self.config.interval, return_when=asyncio.FIRST_COMPLETED
                )
                for w in waits:
                    w.cancel()
                self.wake.clear()
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            self.devices = self.classes = None
            if watchdog is not None:
                watchdog.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watchdog
            if self.plugins is not None:
                await self.plugins.close()

    async def _logged_pass(self) -> None:
        try:
            report = await self.run_pass()
        except SysfsError as e:
            log.error("scan failed, nothing written: %s", e)
            return
        except ApiError as e:
            log.error("sync failed: %s; retrying at the next pass", e.message)
            return
        except Exception:
            # One broken pass (say, an unusable plugin directory) must not end the agent.
            log.exception("pass failed; retrying at the next pass")
            return
        # A skipped function or unreadable file is said once, not at every rescan.
        for note in report.notes:
            if note not in self._notes:
                log.warning("%s", note)
        self._notes = report.notes
        s = report.sync
        if report.changed:
            log.info(
                "node %s: created %s, updated %s, deleted %s, reset %s, reset failed %s, "
                "bound to vfio-pci %s",
                self.config.node,
                s.created,
                s.updated,
                s.deleted,
                sorted(report.resets.done),
                sorted(report.resets.failed),
                sorted(report.bindings.done),
            )
        for address, why in sorted(report.bindings.refused.items()):
            if why not in self._refusals.get(address, ""):
                log.warning("%s: %s", address, why)
        self._refusals = dict(report.bindings.refused)
        for error in s.errors:
            log.warning("%s", error)
