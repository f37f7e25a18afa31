"""What a pass works with: the world, the clock, the config, memory across passes, the plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gpu_binder.api.types import GPUDevice
from gpu_binder.binder.config import Config
from gpu_binder.binder.deadlines import Deadlines
from gpu_binder.binder.plan import Note, Plan
from gpu_binder.binder.scope import Scope
from gpu_binder.binder.verdicts import Verdicts
from gpu_binder.cache.world import World


@dataclass
class Memory:
    """What the binder remembers between passes, in memory, like the reference's maps."""

    # When an attachment without a complete set was first seen, to adopt after the grace,
    # by "<VMI key>/<uid>"; and those whose adoption found no free devices (the metric).
    unmanaged_since: dict[str, datetime] = field(default_factory=dict)
    unadopted: set[str] = field(default_factory=set)
    # When a node first served fewer units than it holds healthy devices.
    degraded_since: dict[str, datetime] = field(default_factory=dict)
    degraded: set[str] = field(default_factory=set)
    # Per node: the shortfall last computed, with the node object and device generation
    # it was computed from, so an unchanged node costs a lookup.
    shortfalls: dict[str, tuple[object, tuple[int | None, int], set[str], bool]] = field(
        default_factory=dict
    )
    # When a device was first seen Unhealthy, and a node first seen gone.
    unhealthy_since: dict[str, datetime] = field(default_factory=dict)
    node_gone_since: dict[str, datetime] = field(default_factory=dict)
    # The last refusal said about an object, so a resync does not repeat it as an Event:
    # per object key ("<namespace>/<name>"), per topic ("order", "adopt", ...). Dropped
    # with the object (see forget_object), so it holds only objects that exist.
    said: dict[str, dict[str, str]] = field(default_factory=dict)
    # Orders whose last placement attempt failed, and the world generation it failed in.
    unplaceable: dict[str, tuple[int, int | None, int, int]] = field(default_factory=dict)
    unplaceable_checked: int = -1
    # Of those, the orders their namespace's quota holds back: no room is made for them.
    quota_blocked: set[str] = field(default_factory=set)
    # Sets that must move but found no room, retried when something frees.
    blocked_moves: set[str] = field(default_factory=set)
    blocked_checked: int = -1
    # Defragmentation runs on a resync sweep, and between them only while it has work
    # under way or an order newly found no room: searching for room is the costliest
    # thing a pass can do, and most capacity changes make none.
    defrag_wanted: bool = False
    # Per device and record kind: the (namespace, name) of the record it would open, found
    # closed already when opening it (closed records are not cached): never opened again.
    closed_records: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # The malformed-quota Event last told per ResourceQuota ("namespace/name").
    quota_said: dict[str, str] = field(default_factory=dict)
    # Orphan copies (World.orphan_copies) the reconciler tried to write as their record
    # says, by name: one whose record is gone (pruned) is not tried again until it changes.
    orphans_tried: dict[str, object] = field(default_factory=dict)
    # Per step, what a key looked like when the step last found nothing to do for it: an
    # unchanged key is skipped, which keeps a pass over an unchanged world cheap.
    clean: dict[str, Verdicts] = field(default_factory=dict)
    # Clean orders whose verdict a clock will change (a reservation running out).
    order_deadlines: Deadlines = field(default_factory=Deadlines)
    # Per node: its bound devices by VM key, as of a device generation (steps.defrag).
    bound_on_node: dict[str, tuple[int, dict[str, list[GPUDevice]]]] = field(default_factory=dict)
    # Sets held for the VMI their bind request was for (steps.sets.awaiting_vmi), due when
    # the wait ends: a ghost's set goes then, not at the next resync.
    vmi_arrivals: Deadlines = field(default_factory=Deadlines)
    # Answered bind requests, by key, due for deletion should their webhook not delete them.
    request_expiry: Deadlines = field(default_factory=Deadlines)
    # Orders whose VMI was said to block a drain (steps.drains), to unsay once it does not.
    drain_blocked: set[str] = field(default_factory=set)

    def verdicts(self, step: str) -> Verdicts:
        v = self.clean.get(step)
        if v is None:
            v = self.clean[step] = Verdicts()
        return v


@dataclass
class Context:
    world: World
    config: Config
    now: datetime
    memory: Memory
    plan: Plan
    scope: Scope = field(default_factory=lambda: Scope(full=True))

    def say(self, key: str, note: Note) -> None:
        """A refusal or warning, recorded as an Event only when it changed.

        `key` is "<topic>/<object key>", e.g. "order/tenant/vm"."""
        topic, _, obj = key.partition("/")
        said = self.memory.said.setdefault(obj, {})
        if said.get(topic) == note.message:
            return
        said[topic] = note.message
        self.plan.note(note)

    def is_clean(self, step: str, key: str, signature: object) -> bool:
        return self.memory.verdicts(step).get(key) == signature

    def mark(self) -> int:
        """How many writes and notes the plan holds: compare after deciding about a key."""
        return len(self.plan.writes) + len(self.plan.notes)

    def settle(self, step: str, key: str, signature: object, mark: int) -> None:
        """Remember key as clean for step when deciding about it wrote nothing."""
        clean = self.memory.verdicts(step)
        if self.mark() == mark:
            clean[key] = signature
        else:
            clean.forget(key)

    def unsay(self, key: str) -> None:
        topic, _, obj = key.partition("/")
        said = self.memory.said.get(obj)
        if said is not None:
            said.pop(topic, None)
            if not said:
                del self.memory.said[obj]

    def forget_object(self, key: str) -> None:
        """The VM or VMI with this key is gone: nothing said about it is remembered."""
        self.memory.said.pop(key, None)

    def prune_said(self) -> None:
        """Drop what was said about objects that no longer exist: for a resync sweep, in
        O(objects with a refusal standing), which events about the rest do not reach
        (a refused request whose VM and VMI never came)."""
        world = self.world
        said = self.memory.said
        for key in [k for k in said if k not in world.vms and k not in world.vmis]:
            del said[key]
