"""The binder's view of the cluster: informer caches plus indexes kept as events arrive.

Indexes are updated per event, never rebuilt per pass, so a pass costs what it reads.
The device cache is write-through: the binder's own writes enter it from the write's
response at once, so the next decision never acts on what the binder itself replaced.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpu_binder.api.instancetype import ControllerRevision
from gpu_binder.api.kinds import Event, KubeVirt
from gpu_binder.api.kubevirt import (
    ENDED_PHASES,
    STARTED_PHASES,
    Node,
    VirtualMachine,
    VirtualMachineInstance,
)
from gpu_binder.api.pod import Pod
from gpu_binder.api.quota import ResourceQuota
from gpu_binder.api.types import (
    USAGE_FINALIZER,
    GPUBindRequest,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
    RecordKind,
    RequestPhase,
    is_copy,
    watched_record,
)
from gpu_binder.cache.deviceindex import DeviceIndex, discard_from
from gpu_binder.cache.launchers import Launchers, is_launcher_pod
from gpu_binder.cache.orders import Orders
from gpu_binder.cache.vmiorder import Resolved, revision_key
from gpu_binder.client.interface import WatchEvent
from gpu_binder.placement.mix import Demand, Mix
from gpu_binder.placement.options import group
from gpu_binder.placement.recent import RECENT_ORDERS, Recent

# Deleted VMIs whose finish time is kept: far more than end between two passes.
ENDED_VMIS_KEPT = 10_000
# Deleted VMs remembered by uid (World.gone_vms): far more than a burst of starts whose
# VMs are deleted while their requests wait.
GONE_VMS = 4096


def _rv(obj: Any) -> int:
    try:
        return int(obj.metadata.resource_version)
    except (TypeError, ValueError):
        return -1


def vm_key_of_vmi(vmi: VirtualMachineInstance) -> str:
    """The order a VMI runs for: its VirtualMachine, or itself when it has none."""
    return vmi.order_key


class World(Orders):
    """Everything the binder decides on, fed by watch events; the queries about orders
    are cache.orders's."""

    def __init__(
        self, clock: Callable[[], datetime] | None = None, recent_orders: int = RECENT_ORDERS
    ) -> None:
        # The binder's own clock, for the times it observes (see seen_running); None where
        # the world is fed from a recording or by a tool, which observe nothing.
        self.clock = clock
        self.devices = DeviceIndex()
        self.classes: dict[str, GPUClass] = {}
        self.class_by_resource: dict[str, GPUClass] = {}
        self.nodes: dict[str, Node] = {}
        self.vms: dict[str, VirtualMachine] = {}
        # VMIs as the binder trusts them: a phase their launcher pod belies is overruled
        # (cache.launchers, held_by_launcher).
        self.vmis: dict[str, VirtualMachineInstance] = {}
        self.launchers = Launchers()
        # The instancetype revisions KubeVirt recorded (INSTANCETYPE_REVISIONS), and the VMs
        # reading each, so a revision that comes or changes re-decides their orders.
        self.revisions: dict[str, ControllerRevision] = {}
        self.vms_by_revision: dict[str, set[str]] = defaultdict(set)
        self._revision_of: dict[str, str] = {}
        # Live VMIs by the order they run for (VM key, or the VMI's own key).
        self.vmis_by_order: dict[str, set[str]] = defaultdict(set)
        # VMIs with no VirtualMachine: each is an order of its own, under its own key.
        self.standalone: set[str] = set()
        # Nodes holding devices whose Node is gone or not Ready: their devices may be Lost.
        self.down_nodes: set[str] = set()
        # Cordoned nodes (spec.unschedulable): a drain may wait on their GPU VMIs.
        self.cordoned: set[str] = set()
        self.requests: dict[str, GPUBindRequest] = {}
        self.pending_requests: set[str] = set()
        # Bind requests this process's own webhook handed its reconciler while leading, by
        # "namespace/name" (names no API object can have): never written, answered by the
        # requests step as the API's are (binder.writes.Answer), dropped once answered or
        # when leadership changes (webhook.decision `_ask_here`).
        self.asked: dict[str, GPUBindRequest] = {}
        # The uids of the VMs last seen deleted, oldest first (at most GONE_VMS): a request
        # handed over in memory for one of them has no owner to be collected with, and
        # the requests step refuses it instead of binding for a VM that is gone.
        self.gone_vms: dict[str, None] = {}
        # Devices as this process wrote them while leading: name → the resourceVersion its
        # write's response had (see `written_device`). Cleared whenever leadership changes.
        self.written: dict[str, str] = {}
        # Devices holding a decision a pass staged and has not written (Plan) yet.
        self.staged: set[str] = set()
        # Open records of the ledger (binder.ledger) by "namespace/name", and by name.
        self.records: dict[str, GPUUsageRecord] = {}
        self.record_keys: dict[str, str] = {}
        self.open_records: set[str] = set()
        # Open records by device, per kind.
        self.open_attached: dict[str, set[str]] = defaultdict(set)
        self.open_reserved: dict[str, set[str]] = defaultdict(set)
        # Tenants' open copies of records, by name; those whose record is not open.
        self.copies: dict[str, GPUUsageRecord] = {}
        self.orphan_copies: set[str] = set()
        # Open records by VMI uid: its usage finalizer goes once it has none.
        self.open_by_vmi: dict[str, set[str]] = defaultdict(set)
        # VMIs holding the usage finalizer whose GPU use is over (see usage_over): the
        # binder removes it once their records are closed. Kept per event, so a pass looks
        # at the VMIs that changed into this state, not at every VMI.
        self.usage_held: set[str] = set()
        # ResourceQuotas by "namespace/name" and by namespace; a namespace's limits on
        # classes are read again only when its quotas (quota_gen) or the classes change.
        self.quotas: dict[str, ResourceQuota] = {}
        self.quotas_by_namespace: dict[str, set[str]] = defaultdict(set)
        self.quota_gen: dict[str, int] = {}
        self.quotas_changed = 0
        self.quota_cache: dict[str, tuple[tuple[int, int], Any]] = {}
        self.kubevirt: dict[str, KubeVirt] = {}
        # Device classes the KubeVirt CR has served twice, per CR object and class generation
        # (binder.hostdevices.served_twice).
        self.served_twice_cache: tuple[object, int, dict[str, str]] | None = None
        # When deleted VMIs finished, by uid, oldest first (see vmi_ended_at).
        self.ended_vmis: dict[str, datetime] = {}
        # By uid, when this world last held the VMI live: the arrival of the version that
        # ended it (see _observe_end). Kept as long as ended_vmis.
        self.seen_running: dict[str, datetime] = {}
        # By uid, when this world last held the VMI not yet started: the arrival of the
        # version that started it (Scheduled or Running; see _observe_start).
        self.seen_unstarted: dict[str, datetime] = {}
        # Devices whose class must be decided again (new, changed spec, class or node change).
        self.dirty: set[str] = set()
        self.class_gen = 0
        # A change that touches every key (a class): the next pass sweeps everything.
        self.needs_full = True
        # Orders per VM key, parsed once per VM and revision object and class generation;
        # what each VMI runs with, resolved once per VMI object and node generation.
        self._orders: dict[str, tuple[object, object, dict[str, int] | None]] = {}
        self._runs: dict[str, tuple[object, int | None, str, int | None, int, Resolved]] = {}
        self.synced = False
        # Told of every bind request change, the binder's own answers (write-through)
        # included: the webhook's admissions wait on it (webhook.answers).
        self.on_request: Callable[[GPUBindRequest, bool], None] | None = None
        # The order mix placement weighs free GPUs by: the newest orders' demands, kept as
        # VMs (and standalone VMIs) come, change and go (see placement.mix, .recent).
        self.mix = Mix()
        self.recent = Recent(self.mix, recent_orders)

    # --- feeding ----------------------------------------------------------------------

    def apply(self, event: WatchEvent[Any]) -> None:
        """Take one watch event into the caches and indexes."""
        obj = event.object
        deleted = event.type == "DELETED"
        if isinstance(obj, GPUDevice):
            self._apply_device(obj, deleted)
        elif isinstance(obj, VirtualMachineInstance):
            self._apply_vmi(obj, deleted)
        elif isinstance(obj, VirtualMachine):
            key = sys.intern(obj.key)  # the key object of the device index (touch_key)
            _put(self.vms, key, obj, deleted)
            if deleted and obj.metadata.uid:
                self.gone_vms[obj.metadata.uid] = None
                if len(self.gone_vms) > GONE_VMS:
                    del self.gone_vms[next(iter(self.gone_vms))]
            self._index_revision(key, "" if deleted else revision_key(obj))
            self.devices.touch_key(key)
            self._order_changed(key)
            if deleted:
                self._orders.pop(key, None)
                self._forget_key(key)
        elif isinstance(obj, ControllerRevision):
            deleted = deleted or not obj.is_instancetype
            _put(self.revisions, obj.key, obj, deleted)
            for key in sorted(self.vms_by_revision.get(obj.key, ())):
                self.devices.touch_key(key)
                self._order_changed(key)
        elif isinstance(obj, Node):
            self._apply_node(obj, deleted)
        elif isinstance(obj, Pod):
            deleted = deleted or not is_launcher_pod(obj)
            for key in sorted(self.launchers.apply(obj, deleted)):
                self._rejudge_vmi(key)
        elif isinstance(obj, GPUClass):
            self._apply_class(obj, deleted)
        elif isinstance(obj, GPUBindRequest):
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            _put(self.requests, key, obj, deleted)
            if not deleted and obj.status.phase == RequestPhase.PENDING:
                self.pending_requests.add(key)
            else:
                self.pending_requests.discard(key)
            if self.on_request is not None:
                self.on_request(obj, deleted)
        elif isinstance(obj, GPUUsageRecord):
            # Only open records are cached (watched.SELECTORS): a closed one, by an event or
            # by the response of the write that closed it, leaves the cache.
            deleted = deleted or not watched_record(obj)
            if is_copy(obj):
                self._apply_copy(obj, deleted)
            else:
                self._apply_record(obj, deleted)
        elif isinstance(obj, ResourceQuota):
            self._apply_quota(obj, deleted)
        elif isinstance(obj, KubeVirt):
            key = f"{obj.metadata.namespace}/{obj.metadata.name}"
            old = self.kubevirt.get(key)
            _put(self.kubevirt, key, obj, deleted)
            if deleted or old is None or old.raw.get("spec") != obj.raw.get("spec"):
                # Which classes it lets the binder serve may have changed (kubevirtcr): an
                # order that found no room is tried again.
                self.devices.capacity_gen += 1
        elif isinstance(obj, Event):
            return

    def _apply_quota(self, q: ResourceQuota, deleted: bool) -> None:
        old = self.quotas.get(q.key)
        _put(self.quotas, q.key, q, deleted)
        ns = q.metadata.namespace
        if deleted:
            discard_from(self.quotas_by_namespace, ns, q.key)
        else:
            self.quotas_by_namespace[ns].add(q.key)
        if deleted or old is None or (old.hard, old.scoped) != (q.hard, q.scoped):
            self.quota_gen[ns] = self.quota_gen.get(ns, 0) + 1
            self.quotas_changed += 1
            # An order the quota held back may fit now; tried again like one that found
            # no room (steps.orders).
            self.devices.capacity_gen += 1

    def _apply_record(self, rec: GPUUsageRecord, deleted: bool) -> None:
        key = f"{rec.metadata.namespace}/{rec.metadata.name}"
        name = rec.metadata.name
        _put(self.records, key, rec, deleted)
        by_device = (
            self.open_attached if rec.spec.kind == RecordKind.ATTACHED else self.open_reserved
        )
        vmi_uid = rec.spec.vmi.uid if rec.spec.vmi is not None else ""
        if not deleted:
            self.open_records.add(key)
            self.record_keys[name] = key
            self.orphan_copies.discard(name)
            by_device[rec.spec.device].add(key)
            if vmi_uid:
                self.open_by_vmi[vmi_uid].add(key)
        else:
            self.open_records.discard(key)
            if self.record_keys.get(name) == key:
                del self.record_keys[name]
                if name in self.copies:
                    self.orphan_copies.add(name)
            discard_from(by_device, rec.spec.device, key)
            if vmi_uid:
                discard_from(self.open_by_vmi, vmi_uid, key)

    def _apply_copy(self, copy: GPUUsageRecord, deleted: bool) -> None:
        """A tenant's open copy of a record (binder.ledger); one whose record is not open
        any more is an orphan, which the records step closes from the ledger. A record
        from before the ledger that has become a copy leaves the records."""
        name = copy.metadata.name
        legacy = f"{copy.metadata.namespace}/{name}"
        if legacy in self.records:
            self._apply_record(self.records[legacy], deleted=True)
        _put(self.copies, name, copy, deleted)
        if not deleted and name not in self.record_keys:
            self.orphan_copies.add(name)
        else:
            self.orphan_copies.discard(name)

    def put_device(self, d: GPUDevice) -> None:
        """Write-through: the response of the binder's own write, or a staged decision."""
        old = self.devices.get(d.metadata.name)
        self.devices.put(d)
        self._released(old, d)

    def written_device(self, name: str) -> GPUDevice | None:
        """The device as the API server holds it, when the world knows that without asking:
        the response of this process's own last write of it, as leader, still the version
        the world holds (no staged decision over it, no newer event). Only the leader writes
        a device's status (its binding, its phase), and the lease fences every other binder
        while it leads, so the API server holds that status until this process writes
        again. The caller checks that this process still leads."""
        rv = self.written.get(name)
        if not rv or name in self.staged:
            return None
        d = self.devices.get(name)
        if d is None or d.metadata.resource_version != rv:
            return None
        return d

    def _apply_device(self, d: GPUDevice, deleted: bool) -> None:
        name = d.metadata.name
        # A device being deleted with no finalizer left is gone from the API: this is the
        # response of the write that removed the last one, and writing it through must not
        # bring back a ghost that still holds its binding.
        if deleted or (d.metadata.deletion_timestamp is not None and not d.metadata.finalizers):
            self.devices.remove(name)
            self.dirty.discard(name)
            self.written.pop(name, None)
            return
        old = self.devices.get(name)
        # Events older than what the binder already wrote through must not regress it.
        if old is not None and _rv(old) > _rv(d) >= 0:
            return
        if old is None or old.spec != d.spec:
            self.dirty.add(name)
            node = self.nodes.get(d.spec.node_name)
            if node is None or not node.ready:
                self.down_nodes.add(d.spec.node_name)  # its devices may have to be Lost
        self.devices.put(d)
        self._released(old, d)

    def _released(self, old: GPUDevice | None, new: GPUDevice) -> None:
        """A device left its set: the set's key may have nothing left (_forget_key)."""
        was = old.status.binding if old is not None else None
        now = new.status.binding
        if was is not None and (now is None or now.vm.key != was.vm.key):
            self._forget_key(was.vm.key)

    def _forget_key(self, key: str) -> None:
        """A VM key with no VM, VMI or device bound to it any more: its generation goes (a
        VM of that name again is touched anew, with a generation never used), so that a
        binder running for months keeps nothing per VM it ever saw."""
        if key not in self.vms and not self.vmis_by_order.get(key):
            self.devices.forget_key(key)

    def _index_revision(self, vm_key: str, rev_key: str) -> None:
        old = self._revision_of.pop(vm_key, "")
        if old:
            discard_from(self.vms_by_revision, old, vm_key)
        if rev_key:
            self._revision_of[vm_key] = rev_key
            self.vms_by_revision[rev_key].add(vm_key)

    def _trusted(self, vmi: VirtualMachineInstance) -> VirtualMachineInstance:
        """The VMI as the binder takes it: ended only once no launcher pod belies it."""
        held = vmi.phase in ENDED_PHASES and self.launchers.holds(vmi, self.node_ready)
        return vmi if held == vmi.held_by_launcher else replace(vmi, held_by_launcher=held)

    def _rejudge_vmi(self, key: str) -> None:
        """Its launcher pods or their node changed: take the VMI in again if that changes
        whether it is in use."""
        vmi = self.vmis.get(key)
        if vmi is not None and self._trusted(vmi) is not vmi:
            self._apply_vmi(vmi, False)

    def _apply_vmi(self, vmi: VirtualMachineInstance, deleted: bool) -> None:
        if not deleted:
            vmi = self._trusted(vmi)
        old = self.vmis.get(vmi.key)
        if old is not None and old.live:
            self._observe_end(old, vmi, deleted)
            self._observe_start(old, vmi, deleted)
        if old is not None:
            discard_from(self.vmis_by_order, vm_key_of_vmi(old), old.key)
        _put(self.vmis, vmi.key, vmi, deleted)
        if deleted:
            self._runs.pop(vmi.key, None)
        if not deleted and USAGE_FINALIZER in vmi.metadata.finalizers and usage_over(vmi):
            self.usage_held.add(vmi.key)
        else:
            self.usage_held.discard(vmi.key)
        if not deleted and vmi.vm_name is None:
            self.standalone.add(vmi.key)
        else:
            self.standalone.discard(vmi.key)
        if not deleted:
            self.vmis_by_order[vm_key_of_vmi(vmi)].add(vmi.key)
        elif (end := vmi.finish) is not None:
            # A VMI may end and be deleted before a pass sees it end: keep its finish time,
            # so its devices' detach time and its usage records carry it, not the pass's.
            # Not its deletionTimestamp: a VMI being deleted ran on until it finished.
            self.ended_vmis[vmi.metadata.uid] = end
            if len(self.ended_vmis) > ENDED_VMIS_KEPT:
                del self.ended_vmis[next(iter(self.ended_vmis))]
        self.devices.touch_key(vm_key_of_vmi(vmi))
        if vmi.vm_name is None or (old is not None and old.vm_name is None):
            self._order_changed(vm_key_of_vmi(vmi))
        if deleted:
            self._forget_key(vm_key_of_vmi(vmi))

    def _observe_start(
        self, old: VirtualMachineInstance, new: VirtualMachineInstance, deleted: bool
    ) -> None:
        """Remember when this world last held a VMI not yet started: when the version
        starting it arrives. Its start is stamped by virt-controller's and its node's
        clocks, which may be behind the binder's: an attachment billed from that stamp
        must not begin before the binder saw the VMI unstarted. Late by the watch's
        delivery, as seen_running is, so it bounds only that stamp, never the launcher
        pod's binding, which the API server stamped (steps.attachments `_since`)."""
        if self.clock is None or deleted or new.metadata.uid != old.metadata.uid:
            return
        if old.phase not in STARTED_PHASES and new.phase in STARTED_PHASES:
            self.seen_unstarted[new.metadata.uid] = self.clock()
            if len(self.seen_unstarted) > ENDED_VMIS_KEPT:
                del self.seen_unstarted[next(iter(self.seen_unstarted))]

    def _observe_end(
        self, old: VirtualMachineInstance, new: VirtualMachineInstance, deleted: bool
    ) -> None:
        """Remember when this world last held a live VMI live: when the version ending it
        (Succeeded/Failed, deleted, or another uid under its name) arrives.

        Its status is its tenant's to write (VMIs have no status subresource): Succeeded
        with a finish an hour back must not end its billing an hour back (issue 11, attack
        4). This bound is late by the watch's delivery (milliseconds; after a broken
        watch, by how long this binder could not see the VMI). A VMI first seen ended has
        none: the binder never saw it run. Standby replicas watch too, so a new leader
        keeps what it saw as a standby."""
        if self.clock is None:
            return
        if deleted or not new.live or new.metadata.uid != old.metadata.uid:
            self.seen_running[old.metadata.uid] = self.clock()
            if len(self.seen_running) > ENDED_VMIS_KEPT:
                del self.seen_running[next(iter(self.seen_running))]

    def _apply_node(self, node: Node, deleted: bool) -> None:
        old = self.nodes.get(node.name)
        _put(self.nodes, node.name, node, deleted)
        if (old is not None and old.ready) != (not deleted and node.ready):
            for key in sorted(self.launchers.vmis_on.get(node.name, ())):
                self._rejudge_vmi(key)
        if deleted or not node.ready:
            self.down_nodes.add(node.name)
        else:
            self.down_nodes.discard(node.name)
        if not deleted and node.unschedulable:
            self.cordoned.add(node.name)
        else:
            self.cordoned.discard(node.name)
        self.devices.capacity_gen += 1
        if deleted:
            self.devices.resources.set_allocatable(node.name, None, None)
        else:
            self.devices.resources.set_allocatable(node.name, node.cpu_milli, node.memory_bytes)
        self.devices.touch_node(node.name)
        if old is None or deleted or old.metadata.labels != node.metadata.labels:
            self.dirty.update(self.devices.names_on(node.name))

    def _apply_class(self, cls: GPUClass, deleted: bool) -> None:
        old = self.classes.get(cls.metadata.name)
        _put(self.classes, cls.metadata.name, cls, deleted)
        if not deleted and old is not None and old.spec == cls.spec:
            return  # a status write: nothing a decision reads changed
        # Two classes naming one resourceName: the older serves it, so a new class with a
        # typo never takes the resource of the VMs already ordering from the old one
        # (the newer is shown not Ready, see steps.status).
        self.class_by_resource = {}
        for c in sorted(self.classes.values(), key=_age):
            self.class_by_resource.setdefault(c.spec.resource_name, c)
        self.devices.capacity_gen += 1
        self.class_gen += 1
        self._orders.clear()
        self.needs_full = True
        self.dirty.update(self.devices.by_name)
        for key in self.recent.keys() | set(self.vms) | self.standalone:
            self._order_changed(key)

    def _order_changed(self, key: str) -> None:
        """Count the order of this key in the mix and its CPU and memory, as it is now."""
        resources = self.devices.resources
        source: VirtualMachine | VirtualMachineInstance | None = self.vms.get(key)
        if source is None:
            source = next((v for v in self.live_vmis(key) if v.vm_name is None), None)
        demands: tuple[Demand, ...] = ()
        # An order being deleted (its VM, or a standalone VMI shutting down, which runs on
        # until it ends) asks for nothing new.
        if source is not None and source.metadata.deletion_timestamp is None:
            if isinstance(source, VirtualMachine):
                order = self.vm_order(source) or {}
            else:
                order = self.runs_with(source).order
            demands = demands_of(
                order,
                self._alternatives(source.alternatives),
                source.cpu_milli,
                source.memory_bytes,
            )
        created = source.metadata.creation_timestamp if source is not None else None
        self.recent.set(key, created, demands)
        if source is None:
            resources.forget_request(key)
        else:
            resources.set_request(key, (source.cpu_milli, source.memory_bytes))

    # --- queries ----------------------------------------------------------------------

    @property
    def capacity_gen(self) -> int:
        return self.devices.capacity_gen

    def vmi_ended_at(self, key: str, uid: str) -> datetime | None:
        """When the VMI with this key and uid ended, if known: its finish time, remembered
        for a while after the VMI is gone, but never before this binder last saw it live
        (seen_running: the finish is in its status, which its tenant can write). None when
        it did not say (it went without finishing, or was gone before the binder saw it):
        the caller's now is the best known, since a VMI runs on after its deletion began
        until it is gone."""
        vmi = self.vmis.get(key)
        if vmi is not None and vmi.metadata.uid == uid:
            reported = vmi.finish
        else:
            reported = self.ended_vmis.get(uid)
        seen = self.seen_running.get(uid)
        if reported is None or seen is None:
            return reported
        return max(reported, seen)

    def node_ready(self, name: str) -> bool:
        """A node whose kubelet reports: present and Ready."""
        node = self.nodes.get(name)
        return node is not None and node.ready

    def node_usable(self, name: str) -> bool:
        """A node new sets may go to: present, Ready, not cordoned."""
        node = self.nodes.get(name)
        return node is not None and node.ready and not node.unschedulable


def usage_over(vmi: VirtualMachineInstance) -> bool:
    """Whether the VMI uses GPUs no more: it ended (Succeeded/Failed), or it is being
    deleted before it ever got a node. One being deleted while it runs, or once scheduled,
    holds its devices until it ends (see VirtualMachineInstance.live)."""
    if not vmi.live:
        return True
    return vmi.being_deleted and not vmi.node_name and vmi.started_at is None


def demands_of(
    order: dict[str, int], alternatives: tuple[str, ...], cpu_milli: int, memory_bytes: int
) -> tuple[Demand, ...]:
    """An order as the mix counts it: its interchangeable group as one demand accepting
    each of its classes, every other class as a demand of its own."""
    named = group(order, alternatives)
    out: list[Demand] = []
    if named:
        gpus = sum(order[c] for c in named)
        out.append(Demand(gpus, cpu_milli, memory_bytes, frozenset(alternatives)))
    for c, n in sorted(order.items()):
        if c not in named:
            out.append(Demand(n, cpu_milli, memory_bytes, frozenset((c,))))
    return tuple(out)


def _age(cls: GPUClass) -> tuple[datetime, str]:
    """Oldest first, then by name (a class not yet stored sorts last)."""
    created = cls.metadata.creation_timestamp
    return (created or datetime.max.replace(tzinfo=UTC), cls.metadata.name)


def _put(store: dict[str, Any], key: str, obj: Any, deleted: bool) -> None:
    if deleted:
        store.pop(key, None)
    else:
        store[key] = obj
