"""What a pass works with: the world, the clock, the config, memory across passes, the plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gpu_binder.binder.config import Config
from gpu_binder.binder.deadlines import Deadlines
from gpu_binder.binder.plan import Note, Plan
from gpu_binder.binder.scope import Scope
from gpu_binder.binder.verdicts import Verdicts
from gpu_binder.binder.world import World


@dataclass
class Memory:
    """What the binder remembers between passes, in memory, like the reference's maps."""

    # When an attachment without a complete set was first seen, to adopt after the grace.
    unmanaged_since: dict[str, datetime] = field(default_factory=dict)
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
    # The last refusal said about an object, so a resync does not repeat it as an Event.
    said: dict[str, str] = field(default_factory=dict)
    # Orders whose last placement attempt failed, and the world generation it failed in.
    unplaceable: dict[str, tuple[int, int | None, int]] = field(default_factory=dict)
    unplaceable_checked: int = -1
    # Sets that must move but found no room, retried when something frees.
    blocked_moves: set[str] = field(default_factory=set)
    blocked_checked: int = -1
    # Defragmentation runs on a resync sweep, and between them only while it has work
    # under way or an order newly found no room: searching for room is the costliest
    # thing a pass can do, and most capacity changes make none.
    defrag_wanted: bool = False
    # Per step, what a key looked like when the step last found nothing to do for it: an
    # unchanged key is skipped, which keeps a pass over an unchanged world cheap.
    clean: dict[str, Verdicts] = field(default_factory=dict)
    # Clean orders whose verdict a clock will change (a reservation running out).
    order_deadlines: Deadlines = field(default_factory=Deadlines)

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
        """A refusal or warning, recorded as an Event only when it changed."""
        if self.memory.said.get(key) == note.message:
            return
        self.memory.said[key] = note.message
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
        self.memory.said.pop(key, None)
