"""Attachments: which bound devices a live VMI uses; adoption of unmanaged VMIs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import (
    Attachment,
    BindReason,
    GPUDevice,
    ObjectRef,
    Phase,
)
from gpu_binder.binder import ops
from gpu_binder.binder.context import Context
from gpu_binder.cache.world import vm_key_of_vmi


@dataclass
class AttachmentsMemory:
    # When an attachment without a complete set was first seen, to adopt after the grace,
    # by "<VMI key>/<uid>"; and those whose adoption found no free devices (the metric).
    unmanaged_since: dict[str, datetime] = field(default_factory=dict)
    unadopted: set[str] = field(default_factory=set)


def attachments(ctx: Context) -> None:
    _detach_ended(ctx)
    world = ctx.world
    if ctx.scope.full:
        _prune_unmanaged(ctx)
    clean = ctx.memory.verdicts("attach")
    for vmi in ctx.scope.vmis(world, clean):
        if not vmi.live:
            _managed(ctx, vmi.key, vmi.metadata.uid)  # it ended: nothing to adopt any more
            continue
        if not vmi.node_name:
            continue
        signature = (world.devices.key_gen.get(vm_key_of_vmi(vmi)), world.class_gen)
        cached = clean.get(vmi.key)
        if isinstance(cached, tuple) and cached[0] is vmi and cached[1] == signature:
            continue
        mark = ctx.mark()
        settled = _attach(ctx, vmi)
        if settled and ctx.mark() == mark:
            clean[vmi.key] = (vmi, signature)
        else:
            clean.forget(vmi.key)


def _managed(ctx: Context, vmi_key: str, uid: str) -> None:
    """The VMI no longer waits for adoption: adopted, complete, ended or gone."""
    seen_key = f"{vmi_key}/{uid}"
    memory = ctx.memory.of(AttachmentsMemory)
    memory.unmanaged_since.pop(seen_key, None)
    memory.unadopted.discard(seen_key)
    ctx.unsay(f"adopt/{vmi_key}")


def _prune_unmanaged(ctx: Context) -> None:
    """On a resync sweep, forget VMIs that are gone without being seen to end: this costs
    the unmanaged VMIs, which the sweep decides about anyway (none of them is clean)."""
    vmis = ctx.world.vmis
    for seen_key in list(ctx.memory.of(AttachmentsMemory).unmanaged_since):
        vmi_key, _, uid = seen_key.rpartition("/")
        vmi = vmis.get(vmi_key)
        if vmi is None or vmi.metadata.uid != uid or not vmi.live:
            _managed(ctx, vmi_key, uid)


def _detach_ended(ctx: Context) -> None:
    world = ctx.world
    # Per device, the device and VMI objects last seen in use: unchanged, still in use.
    seen = ctx.memory.verdicts("detach")
    by_name, vmis = world.devices.by_name, world.vmis
    for name in ctx.scope.devices_of_interest(world, world.devices.attached, seen):
        d = by_name[name]
        cached = seen.get(name)
        # Checked before reading the device: a sweep over thousands of attachments that
        # did not change must not walk every one of them.
        if isinstance(cached, tuple) and cached[0] is d and vmis.get(cached[1]) is cached[2]:
            continue
        att = d.status.attachment
        assert att is not None
        vmi = vmis.get(att.vmi.key)
        if vmi is not None and vmi.live and vmi.metadata.uid == att.vmi.uid:
            seen[name] = (d, att.vmi.key, vmi)
            continue
        seen.forget(name)
        # The finish virt-handler stamped, by its node's clock: never after the binder's now,
        # nor before the attachment began (DESIGN §2.11).
        reported = world.vmi_ended_at(att.vmi.key, att.vmi.uid) or ctx.now
        ended = max(min(reported, ctx.now), att.since)
        phase = d.status.phase
        if phase == Phase.ATTACHED:
            phase = Phase.BOUND if d.status.binding is not None else Phase.CLEANING
        status = d.status.model_copy(
            update={"attachment": None, "phase": phase, "detached_at": ended}
        )
        ctx.plan.device_status(d.model_copy(update={"status": status}), placement=True)


def _since(ctx: Context, vmi: VirtualMachineInstance, d: GPUDevice) -> datetime:
    """When the VMI began to hold the device: when its launcher pod got the node
    (Scheduled), so an attachment noticed late — after a failover or an outage — is billed
    from then; never before the device's last detach (one interval at a time), nor before
    the binder handed the device to the VMI's VM, nor after now.

    The bind matters for a launcher pod scheduled while it waited for its GPUs: the
    device was another VM's until the bind (a reservation, or an attachment whose detach
    the device forgot when its agent wrote it anew), and billing the VMI from its
    Scheduled time billed that GPU twice (invariant 11). Only an adoption binds a device
    the VMI held already, so its binding says nothing of when the use began.

    The Scheduled time is stamped by virt-controller's clock, which may be minutes off,
    and is its tenant's to write. So the launcher pod's binding to its node is taken when
    it is known (cache.launchers): the API server stamped it by its own clock, and the
    kubelet hands the pod its devices once bound. Else the Scheduled time, never before
    this binder saw it unstarted (World.seen_unstarted). Neither before the VMI was
    created (by the server's clock too)."""
    since = ctx.world.launchers.scheduled_at(vmi)
    if since is None:
        since = vmi.started_at or ctx.now
        # Only the fallback is bounded by this binder's sighting: the pod's binding is the
        # server's stamp, and the watch may bring the unstarted VMI after the pod ran.
        unstarted = ctx.world.seen_unstarted.get(vmi.metadata.uid)
        if unstarted is not None and unstarted > since:
            since = unstarted
    created = vmi.metadata.creation_timestamp
    if created is not None and created > since:
        since = created
    detached = d.status.detached_at
    if detached is not None and detached > since:
        since = detached
    b = d.status.binding
    if b is not None and b.reason != BindReason.ADOPTED and b.bound_at > since:
        since = b.bound_at
    return min(since, ctx.now)


def _attach(ctx: Context, vmi: VirtualMachineInstance) -> bool:
    """Attach the devices the VMI runs with; False while it waits for adoption (a clock
    matters).

    What it runs with is its spec as admitted (cache.vmiorder): the device each slot entry
    names on its set's node, and for entries naming a class's resourceName (served by
    count), that many of the set's devices of the class on its node. Never the devices
    annotation, which its tenant can write.
    """
    world = ctx.world
    key = vm_key_of_vmi(vmi)
    if not world.belongs(vmi):
        # No VM owner, yet named like a VM of its namespace: it runs for no order, and
        # takes nothing of that VM's (the webhook refuses such a VMI GPUs).
        _managed(ctx, vmi.key, vmi.metadata.uid)
        return True
    runs = world.runs_with(vmi)
    if not runs.order:
        _managed(ctx, vmi.key, vmi.metadata.uid)  # it runs with no GPUs of a class
        return True
    # Slots on the node of its set, where the webhook pinned it; resources served by count
    # on the node it runs on (nothing pinned it).
    slot_node = world.vmi_node(vmi)
    if vmi.held_by_launcher and slot_node not in world.launchers.holding_nodes(
        vmi, world.node_ready
    ):
        # It ended, but for a pod on another node, whose devices are that node's: its set
        # moved on meanwhile, and the new one is not in use.
        _managed(ctx, vmi.key, vmi.metadata.uid)
        return True
    own = {d.metadata.name: d for d in world.own_set(key)}
    mine = [own[n] for n in runs.devices if n in own and own[n].spec.node_name == slot_node]
    exact = [n for n in runs.devices if n not in own]
    named = set(runs.devices)
    counted: dict[str, int] = {}
    # Served by count: this VMI's attachments first, so a resync picks the same ones.
    rest = sorted(
        (d for n, d in own.items() if n not in named and d.spec.node_name == vmi.node_name),
        key=lambda d: (not _attached_to(d, vmi), d.metadata.name),
    )
    for d in rest:
        c = d.status.class_name
        if counted.get(c, 0) < runs.by_count.get(c, 0):
            counted[c] = counted.get(c, 0) + 1
            mine.append(d)
    ref = ObjectRef(namespace=vmi.metadata.namespace, name=vmi.metadata.name, uid=vmi.metadata.uid)
    for d in mine:
        _attach_device(ctx, vmi, d, ref, key)
    by_count = {c: n - counted.get(c, 0) for c, n in runs.by_count.items() if n > counted.get(c, 0)}
    seen_key = f"{vmi.key}/{vmi.metadata.uid}"
    if not exact and not by_count:
        _managed(ctx, vmi.key, vmi.metadata.uid)
        return True
    first = ctx.memory.of(AttachmentsMemory).unmanaged_since.setdefault(seen_key, ctx.now)
    if ctx.now - first < ctx.config.attachment_grace:
        return False  # a bind request may still be in flight for it
    _adopt(ctx, vmi, key, exact, by_count, ref)
    return False


def _attached_to(d: GPUDevice, vmi: VirtualMachineInstance) -> bool:
    att = d.status.attachment
    return att is not None and att.vmi.uid == vmi.metadata.uid


def _attach_device(
    ctx: Context, vmi: VirtualMachineInstance, d: GPUDevice, ref: ObjectRef, key: str
) -> None:
    binding = d.status.binding
    stamp = binding is not None and not binding.vm.uid and bool(ctx.world.order_uid(key))
    if _attached_to(d, vmi) and not stamp:
        return
    update: dict[str, object] = {}
    if not _attached_to(d, vmi):
        phase = d.status.phase if d.status.phase == Phase.LOST else Phase.ATTACHED
        update = {"attachment": Attachment(vmi=ref, since=_since(ctx, vmi, d)), "phase": phase}
    if binding is not None and (stamp or binding.stopped_at is not None):
        # Bound before its order had a uid (a standalone VMI's request): the set is this
        # uid's from now on, and a later VMI of that name is another order. And it runs:
        # the stop it carried is over.
        changes: dict[str, object] = {"stopped_at": None}
        if stamp:
            changes["vm"] = binding.vm.model_copy(update={"uid": ctx.world.order_uid(key)})
        update["binding"] = binding.model_copy(update=changes)
    status = d.status.model_copy(update=update)
    ctx.plan.device_status(d.model_copy(update={"status": status}), placement=True)


def _adopt(
    ctx: Context,
    vmi: VirtualMachineInstance,
    key: str,
    exact: list[str],
    by_count: dict[str, int],
    ref: ObjectRef,
) -> None:
    """Bind to its VM the devices the VMI runs with: exactly those its slot entries name,
    and free ones of a class it names by resourceName on its node; never touch the VMI.

    A device a slot names is its launcher pod's, whatever its phase: it is adopted unless
    another order holds it, which the binder says and leaves as it is.
    """
    devices = ctx.world.devices
    chosen: list[GPUDevice] = []
    for name in exact:
        d = devices.get(name)
        if d is None or d.status.binding is not None:
            holder = d.status.binding.vm.key if d is not None and d.status.binding else ""
            why = f"bound to {holder}" if holder else "not known to gpu-binder"
            _unadopted(
                ctx,
                vmi,
                key,
                f"VMI {vmi.metadata.name} runs with {name}, which is {why}; gpu-binder "
                "leaves both as they are",
            )
            return
        chosen.append(d)
    for class_name, count in by_count.items():
        free = sorted(devices.free_on(class_name, vmi.node_name))
        if len(free) < count:
            _unadopted(
                ctx,
                vmi,
                key,
                f"VMI {vmi.metadata.name} runs on {vmi.node_name} with {count} × "
                f"{class_name} not bound to it, and the node has only {len(free)} free",
            )
            return
        chosen.extend(devices.by_name[n] for n in free[:count])
    for d in chosen:
        new = ops.bind(
            ctx,
            d,
            key,
            BindReason.ADOPTED,
            f"VMI {vmi.metadata.name} was already running on {d.spec.node_name}",
        )
        status = new.status.model_copy(
            update={
                "attachment": Attachment(vmi=ref, since=_since(ctx, vmi, d)),
                "phase": Phase.LOST if d.status.phase == Phase.LOST else Phase.ATTACHED,
            }
        )
        ctx.plan.device_status(new.model_copy(update={"status": status}), placement=True)
    _managed(ctx, vmi.key, vmi.metadata.uid)


def _unadopted(ctx: Context, vmi: VirtualMachineInstance, key: str, message: str) -> None:
    ctx.say(f"adopt/{vmi.key}", ops.vm_note(ctx, key, "GPUUnmanaged", message, warning=True))
    # The metric counts it.
    ctx.memory.of(AttachmentsMemory).unadopted.add(f"{vmi.key}/{vmi.metadata.uid}")
