"""The embedded API server's storage: objects by kind and the semantics of a write.

One global resourceVersion counter; a write that changes nothing is no write; the status
kept apart from the object; finalizers and deletionTimestamp; ownerReference garbage
collection; Events that expire; injected conflicts; a bounded watch history per kind, and
subscribers called inside each write in one order. `sim.memory.MemoryClient` is the
Client protocol on top of it.
"""

from __future__ import annotations

import builtins
import random
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import ValidationError

from gpu_binder.api.kinds import Resource, T, resource_of
from gpu_binder.api.meta import ObjectMeta, utc
from gpu_binder.client.errors import Conflict, Invalid, NotFound
from gpu_binder.client.interface import EventType, WatchEvent
from gpu_binder.sim.conflicts import ConflictInjector, ConflictPredicate
from gpu_binder.sim.fieldmanagers import MANAGED_KINDS, carried
from gpu_binder.sim.objects import assemble, evolve, same, spec_of, stamp
from gpu_binder.sim.owners import Owners
from gpu_binder.sim.selectors import selector_matches
from gpu_binder.sim.watch import History

Key = tuple[str, str]
Subscriber = Callable[[type[Any], WatchEvent[Any]], None]


def _default_clock() -> datetime:
    return datetime.now(UTC)


class Kind:
    __slots__ = ("history", "kind", "lacking", "objects", "previous", "previous_limit", "resource")

    def __init__(self, kind: type[Any], resource: Resource, history_limit: int) -> None:
        self.kind = kind
        self.resource = resource
        self.objects: dict[Key, Any] = {}
        # Per label key a list asked to lack ("!key"): the keys of the objects without it,
        # kept from that list on. A new leader lists the records not yet labelled, of
        # every record ever written, and nearly all are labelled.
        self.lacking: dict[str, set[Key]] = {}
        self.history = History(history_limit)
        # The object as it was before the change of each recent resourceVersion (None for
        # a creation): a label-selected watch turns a change into ADDED, MODIFIED or
        # DELETED by whether the object matched before and after, as the API server does.
        self.previous: OrderedDict[int, Any] = OrderedDict()
        self.previous_limit = 2 * history_limit

    def without_label(self, label: str) -> set[Key]:
        """The keys of the objects that lack the label."""
        keys = self.lacking.get(label)
        if keys is None:
            keys = self.lacking[label] = {
                key for key, obj in self.objects.items() if label not in obj.metadata.labels
            }
        return keys

    def stored(self, key: Key, obj: Any) -> None:
        self.objects[key] = obj
        for label, keys in self.lacking.items():
            if label in obj.metadata.labels:
                keys.discard(key)
            else:
                keys.add(key)

    def removed(self, key: Key) -> Any:
        for keys in self.lacking.values():
            keys.discard(key)
        return self.objects.pop(key)

    def remember(self, rv: int, previous: Any) -> None:
        self.previous[rv] = previous
        if len(self.previous) > self.previous_limit:
            self.previous.popitem(last=False)


class Store:
    """The objects of every kind and the API server's write path over them.

    `clock` gives timestamps (the simulation's virtual clock); `seed` makes uids repeatable.
    MemoryClient answers the Client protocol on top of it.
    """

    def __init__(
        self,
        clock: Callable[[], datetime] = _default_clock,
        *,
        history_limit: int = 10_000,
        seed: int = 0,
        event_ttl: float | None = None,
    ) -> None:
        self.clock = clock
        self.history_limit = history_limit
        # Seconds an Event lives (the API server's --event-ttl, 1h there); None: forever.
        self.event_ttl = event_ttl
        self._expiry: deque[tuple[datetime, Key]] = deque()
        # Mutating calls answered, no-op writes included: a pass over an unchanged world makes none.
        self.writes = 0
        self._rv = 0
        self._rng = random.Random(seed)
        self._kinds: dict[type[Any], Kind] = {}
        self._owners: Owners[tuple[Kind, Key]] = Owners(lambda e: (e[0].resource.kind, e[1]))
        self._conflicts = ConflictInjector()
        # Each subscriber with the kinds it wants (None: every kind), in subscription
        # order, and per kind the callbacks that want it (rebuilt when they change).
        self._subscribers: tuple[tuple[Subscriber, frozenset[type[Any]] | None], ...] = ()
        self._callbacks: dict[type[Any], tuple[Subscriber, ...]] = {}
        self._pending: deque[tuple[type[Any], WatchEvent[Any]]] = deque()
        self._dispatching = False

    # --- for the embedded cluster ------------------------------------------------------

    def subscribe(
        self, callback: Subscriber, kinds: Collection[type[Any]] | None = None
    ) -> Callable[[], None]:
        """Call callback(kind, event) for every change (of `kinds` only, when given), in
        write order, inside the write.

        Writes the callback makes are delivered after the current event reaches every
        subscriber, so all subscribers see one order. Returns the unsubscribe function.
        """
        wanted = frozenset(kinds) if kinds is not None else None
        self._subscribers = (*self._subscribers, (callback, wanted))
        self._callbacks = {}

        def unsubscribe() -> None:
            self._subscribers = tuple(s for s in self._subscribers if s[0] is not callback)
            self._callbacks = {}

        return unsubscribe

    def inject_conflicts(self, predicate: ConflictPredicate | None) -> None:
        """Make writes lose to a concurrent writer: predicate(kind, stored object) → True.

        The losing write raises Conflict after the stored object got a new
        resourceVersion (a MODIFIED event), as when another writer won the race.
        """
        self._conflicts.predicate = predicate

    def conflict_next_write(self, kind: type[Any], name: str, namespace: str = "") -> None:
        """Make the next write to this object lose to a concurrent writer, once."""
        res = self._kind(kind).resource
        self._conflicts.once(res.kind, *self._key(res, name, namespace))

    @property
    def conflicts_injected(self) -> int:
        return self._conflicts.injected

    def peek(self, kind: type[T], name: str, namespace: str = "") -> T | None:
        """The stored object or None, synchronously (for simulators and checkers)."""
        k = self._kind(kind)
        return cast(T | None, k.objects.get(self._key(k.resource, name, namespace)))

    def objects(self, kind: type[T]) -> builtins.list[T]:
        """Every stored object of a kind, in write order of first creation."""
        return list(self._kind(kind).objects.values())

    def put(self, obj: T) -> T:
        """Store obj as given, status included, creating or replacing it (test fixtures)."""
        k = self._kind(type(obj))
        key = self._key(k.resource, obj.metadata.name, obj.metadata.namespace)
        stored = k.objects.get(key)
        old = stored.metadata if stored is not None else None
        meta = obj.metadata.model_copy(
            update={
                "namespace": key[0],
                "uid": obj.metadata.uid or (old.uid if old else self._new_uid()),
                "generation": obj.metadata.generation or (old.generation if old else 1),
                "creation_timestamp": obj.metadata.creation_timestamp
                or (old.creation_timestamp if old else self._now()),
            }
        )
        return cast(T, self._commit(k, key, stored, self._assemble(k, obj, meta, None)))

    def drop_watches(self) -> None:
        """End every open watch stream, as an API server restart does."""
        for k in self._kinds.values():
            k.history.close_watchers()

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    # --- internals ---------------------------------------------------------------------

    def _expire_events(self, k: Kind, now: datetime) -> None:
        """Remove Events past their TTL, as etcd leases do: a DELETED event for each."""
        while self._expiry and self._expiry[0][0] <= now:
            _, key = self._expiry.popleft()
            stored = k.objects.get(key)
            if stored is not None:
                self._remove(k, key, self._assemble(k, stored, stored.metadata, None, stored))

    def _kind(self, kind: type[Any]) -> Kind:
        k = self._kinds.get(kind)
        if k is None:
            k = self._kinds[kind] = Kind(kind, resource_of(kind), self.history_limit)
        return k

    @staticmethod
    def _key(res: Resource, name: str, namespace: str) -> Key:
        return (namespace if res.namespaced else "", name)

    def _stored(self, k: Kind, name: str, namespace: str) -> Any:
        obj = k.objects.get(self._key(k.resource, name, namespace))
        if obj is None:
            raise NotFound(f'{k.resource.plural} "{name}" not found')
        return obj

    def _now(self) -> datetime:
        # Object metadata times have whole seconds on the wire.
        return utc(self.clock()).replace(microsecond=0)

    def _new_uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    @staticmethod
    def _selects(selector: str, obj: Any) -> bool:
        try:
            return selector_matches(selector, obj.metadata.labels)
        except ValueError as e:
            raise Invalid(str(e)) from None

    @staticmethod
    def _parse(k: Kind, raw: dict[str, Any]) -> Any:
        try:
            return k.resource.parse(raw)
        except (ValidationError, ValueError, TypeError) as e:
            raise Invalid(f"{k.resource.kind} is invalid: {e}") from None

    def _precondition(self, k: Kind, stored: Any, resource_version: str) -> None:
        name = stored.metadata.name
        if resource_version != stored.metadata.resource_version or self._loses_race(k, stored):
            raise Conflict(
                f'Operation cannot be fulfilled on {k.resource.plural} "{name}": the object '
                "has been modified; please apply your changes to the latest version and try again"
            )

    def _loses_race(self, k: Kind, stored: Any) -> bool:
        """Whether an injected concurrent writer wins; if so, its write is stored first."""
        if not self._conflicts.loses(k.resource.kind, stored):
            return False
        meta = stored.metadata
        self._commit(k, self._key(k.resource, meta.name, meta.namespace), stored, stored)
        return True

    def _assemble(
        self,
        k: Kind,
        given: Any,
        meta: ObjectMeta,
        status_of: Any,
        stored: Any = None,
        *,
        written: bool = False,
    ) -> Any:
        """A new version of stored (None: a creation) from given; `written`: by a create or
        an update, which stamps its manager's managedFields entry (sim.fieldmanagers), on
        the kinds that keep them."""
        if k.resource.kind not in MANAGED_KINDS:
            return assemble(given, meta, status_of, stored, lambda raw: self._parse(k, raw))
        now = self._now() if written else None
        return assemble(
            given, meta, status_of, stored, lambda raw: self._parse(k, carried(raw, stored, now))
        )

    def _replace(self, k: Kind, stored: Any, given: Any, status_of: Any) -> Any:
        """Write given over stored with the server's metadata; a write that changes nothing
        is no write (no new resourceVersion, no event), as on the API server."""
        old = stored.metadata
        if given is stored:
            meta = old
        else:
            generation = old.generation + (0 if spec_of(given) == spec_of(stored) else 1)
            meta = evolve(
                given.metadata,
                {
                    "name": old.name,
                    "namespace": old.namespace,
                    "uid": old.uid,
                    "resource_version": old.resource_version,
                    "generation": generation,
                    "creation_timestamp": old.creation_timestamp,
                    "deletion_timestamp": old.deletion_timestamp,
                },
            )
        if old.deletion_timestamp is not None and not set(meta.finalizers) <= set(old.finalizers):
            raise Invalid("no new finalizers can be added if the object is being deleted")
        candidate = self._assemble(k, given, meta, status_of, stored, written=True)
        if same(candidate, stored):
            return stored
        key = (old.namespace, old.name)
        if (
            old.deletion_timestamp is not None
            and not meta.finalizers
            and not _terminates_gracefully(k, candidate)
        ):
            # The last finalizer removed; or a terminating pod's final status (ended), which
            # stands for its kubelet's status write and delete with grace 0 in one.
            return self._remove(k, key, candidate)
        return self._commit(k, key, stored, candidate)

    def _delete(self, k: Kind, stored: Any, graceful: bool = True) -> None:
        meta = stored.metadata
        key = (meta.namespace, meta.name)
        gentle = graceful and _terminates_gracefully(k, stored)
        if not meta.finalizers and not gentle:
            self._remove(k, key, self._assemble(k, stored, meta, None, stored))
        elif meta.deletion_timestamp is None:
            marked = evolve(meta, {"deletion_timestamp": self._now()})
            self._commit(k, key, stored, self._assemble(k, stored, marked, None, stored))

    def _stamp(self, candidate: Any) -> tuple[int, Any]:
        self._rv += 1
        return self._rv, stamp(candidate, str(self._rv))

    def _commit(self, k: Kind, key: Key, stored: Any, candidate: Any) -> Any:
        if stored is candidate:
            candidate = self._assemble(k, stored, stored.metadata, None, stored)
        rv, new = self._stamp(candidate)
        k.stored(key, new)
        self._owners.follow((k, key), stored.metadata if stored is not None else None, new.metadata)
        k.remember(rv, stored)
        self._emit(k, "ADDED" if stored is None else "MODIFIED", rv, new)
        return new

    def _remove(self, k: Kind, key: Key, candidate: Any) -> Any:
        rv, gone = self._stamp(candidate)
        stored = k.removed(key)
        self._owners.follow((k, key), stored.metadata, None)
        k.remember(rv, stored)
        self._emit(k, "DELETED", rv, gone)
        # Garbage collection: dependents with no owner left go too, finalizers honoured.
        for dk, dkey in self._owners.orphans(gone.metadata.uid, self._meta_of):
            dependent = dk.objects.get(dkey)
            if dependent is not None:  # an earlier cascade may have taken it
                self._delete(dk, dependent)
        return gone

    @staticmethod
    def _meta_of(entry: tuple[Kind, Key]) -> ObjectMeta | None:
        obj = entry[0].objects.get(entry[1])
        return obj.metadata if obj is not None else None

    def _emit(self, k: Kind, type_: EventType, rv: int, obj: Any) -> None:
        event: WatchEvent[Any] = WatchEvent(type_, obj)
        k.history.append(rv, event)
        if not self._subscribers:
            return
        self._pending.append((k.kind, event))
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._pending:
                kind, ev = self._pending.popleft()
                for callback in self._callbacks_of(kind):
                    callback(kind, ev)
        finally:
            self._dispatching = False

    def _callbacks_of(self, kind: type[Any]) -> tuple[Subscriber, ...]:
        # Only the subscribers of a kind are called: most follow two or three kinds of a
        # dozen, and every write called every one of them.
        callbacks = self._callbacks.get(kind)
        if callbacks is None:
            callbacks = self._callbacks[kind] = tuple(
                cb for cb, wanted in self._subscribers if wanted is None or kind in wanted
            )
        return callbacks


def _terminates_gracefully(k: Kind, stored: Any) -> bool:
    """A pod bound to a node and not yet ended is only marked when deleted: its kubelet
    stops its containers, then deletes it for good (grace 0); an unbound or ended pod goes
    at once (the API server's pod strategy, CheckGracefulDelete)."""
    if k.resource.kind != "Pod":
        return False
    return bool(getattr(stored, "node_name", "")) and not getattr(stored, "ended", True)
