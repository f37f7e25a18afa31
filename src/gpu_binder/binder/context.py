"""What a pass works with: the world, the clock, the config, memory across passes, the plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar, cast

from gpu_binder.binder.config import Config
from gpu_binder.binder.plan import Note, Plan
from gpu_binder.binder.scope import Scope
from gpu_binder.binder.verdicts import Verdicts
from gpu_binder.cache.world import World

T = TypeVar("T")


@dataclass
class Waiting:
    """Orders waiting for room: the orders step finds them, defragmentation makes room for
    them, the metrics count them."""

    # Orders whose last placement attempt failed, and the world generation it failed in.
    unplaceable: dict[str, tuple[int, int | None, int, int]] = field(default_factory=dict)
    # Of those, the orders their namespace's quota holds back: no room is made for them.
    quota_blocked: set[str] = field(default_factory=set)
    # Defragmentation runs on a resync sweep, and between them only while it has work
    # under way or an order newly found no room: searching for room is the costliest
    # thing a pass can do, and most capacity changes make none.
    defrag_wanted: bool = False


@dataclass
class Memory:
    """What the binder remembers between passes, in memory, like the reference's maps.

    Here is what the pass itself keeps (what was said, what was found clean) and what
    several steps share; what one step remembers alone is a dataclass of its own module,
    kept by `of` (e.g. `memory.of(AttachmentsMemory)`), so no step reads another's.
    """

    # The last refusal said about an object, so a resync does not repeat it as an Event:
    # per object key ("<namespace>/<name>"), per topic ("order", "adopt", ...). Dropped
    # with the object (see forget_object), so it holds only objects that exist.
    said: dict[str, dict[str, str]] = field(default_factory=dict)
    # Per step, what a key looked like when the step last found nothing to do for it: an
    # unchanged key is skipped, which keeps a pass over an unchanged world cheap.
    clean: dict[str, Verdicts] = field(default_factory=dict)
    # Nodes serving fewer units than they hold healthy devices, past degradedGrace: the
    # node-status step decides them, placement and moves keep off them.
    degraded: set[str] = field(default_factory=set)
    waiting: Waiting = field(default_factory=Waiting)
    # Per device and record kind: the (namespace, name) of the record it would open, found
    # closed already when opening it (closed records are not cached): never opened again.
    # The reconciler finds them as it writes; the records steps read them.
    closed_records: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # Orphan copies (World.orphan_copies) the reconciler tried to write as their record
    # says, by name: one whose record is gone (pruned) is not tried again until it changes.
    orphans_tried: dict[str, object] = field(default_factory=dict)
    # Each step's own memory, by its type.
    parts: dict[type, object] = field(default_factory=dict)

    def verdicts(self, step: str) -> Verdicts:
        v = self.clean.get(step)
        if v is None:
            v = self.clean[step] = Verdicts()
        return v

    def of(self, kind: type[T]) -> T:
        """The memory of the step whose dataclass is `kind`, made empty on first use."""
        part = self.parts.get(kind)
        if part is None:
            part = self.parts[kind] = kind()
        return cast(T, part)


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
