"""MemoryClient: the Client protocol on an in-memory store that keeps the API server's semantics.

resourceVersion from one global counter, 409 on a stale write, the status subresource kept
apart from the object, finalizers and deletionTimestamp, ownerReference garbage collection,
label selectors (on lists and watches), merge patch, simplified server-side apply, and
watches with a bounded history. The store holds typed, immutable objects; `list` and `get`
return them as stored.
"""

from __future__ import annotations

import builtins
import random
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from gpu_binder.api.kinds import Resource, T, resource_of
from gpu_binder.api.meta import ObjectMeta, utc
from gpu_binder.client.errors import AlreadyExists, Conflict, Invalid, NotFound
from gpu_binder.client.interface import Client, EventType, ListResult, WatchEvent
from gpu_binder.sim.conflicts import ConflictInjector, ConflictPredicate
from gpu_binder.sim.merge import merge_patch
from gpu_binder.sim.objects import NO_STATUS, assemble, evolve, same, spec_of, stamp
from gpu_binder.sim.owners import Owners
from gpu_binder.sim.selectors import parse_selector, selector_matches
from gpu_binder.sim.watch import History, Selected

Key = tuple[str, str]
Subscriber = Callable[[type[Any], WatchEvent[Any]], None]

# The core Node keeps the status it is created with; custom resources drop it.
_STATUS_ON_CREATE = frozenset({"Node"})


def _default_clock() -> datetime:
    return datetime.now(UTC)


class _Kind:
    __slots__ = ("history", "kind", "objects", "previous", "previous_limit", "resource")

    def __init__(self, kind: type[Any], resource: Resource, history_limit: int) -> None:
        self.kind = kind
        self.resource = resource
        self.objects: dict[Key, Any] = {}
        self.history = History(history_limit)
        # The object as it was before the change of each recent resourceVersion (None for
        # a creation): a label-selected watch turns a change into ADDED, MODIFIED or
        # DELETED by whether the object matched before and after, as the API server does.
        self.previous: OrderedDict[int, Any] = OrderedDict()
        self.previous_limit = 2 * history_limit

    def remember(self, rv: int, previous: Any) -> None:
        self.previous[rv] = previous
        if len(self.previous) > self.previous_limit:
            self.previous.popitem(last=False)


class MemoryClient:
    """An in-memory API server for the embedded cluster, tests and benchmarks.

    `clock` gives timestamps (the simulation's virtual clock); `seed` makes uids repeatable.
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
        self._kinds: dict[type[Any], _Kind] = {}
        self._owners: Owners[tuple[_Kind, Key]] = Owners(lambda e: (e[0].resource.kind, e[1]))
        self._conflicts = ConflictInjector()
        self._subscribers: tuple[Subscriber, ...] = ()
        self._pending: deque[tuple[type[Any], WatchEvent[Any]]] = deque()
        self._dispatching = False

    # --- the Client protocol ----------------------------------------------------------

    async def get(self, kind: type[T], name: str, namespace: str = "") -> T:
        k = self._kind(kind)
        return cast(T, self._stored(k, name, namespace))

    async def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> ListResult[T]:
        k = self._kind(kind)
        items = [
            obj
            for (ns, _), obj in sorted(k.objects.items())
            if (not namespace or ns == namespace)
            and (not label_selector or self._selects(label_selector, obj))
        ]
        return ListResult(items=items, resource_version=str(self._rv))

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent[T]]:
        k = self._kind(kind)
        since: int | None = None
        if resource_version not in (None, "", "0"):
            try:
                since = int(str(resource_version))
            except ValueError:
                raise Invalid(f"invalid resourceVersion {resource_version!r}") from None
        selector = label_selector or ""
        try:
            parse_selector(selector)
        except ValueError as e:
            raise Invalid(str(e)) from None

        def selects(obj: Any) -> bool:
            return selector_matches(selector, obj.metadata.labels)

        initial: list[WatchEvent[Any]] = []
        if since is None:
            initial = [
                WatchEvent("ADDED", o)
                for (ns, _), o in sorted(k.objects.items())
                if (not namespace or ns == namespace) and selects(o)
            ]
        stream = k.history.watch(namespace, since, initial)
        if not selector:
            return cast(AsyncIterator[WatchEvent[T]], stream)

        def previous(event: WatchEvent[Any]) -> Any:
            return k.previous.get(int(event.object.metadata.resource_version or 0))

        def unmatched(previous: Any, event: WatchEvent[Any]) -> Any:
            # The content it last matched with, at the resourceVersion of the change.
            rv = event.object.metadata.resource_version
            return stamp(self._assemble(k, previous, previous.metadata, None, previous), rv)

        selected = Selected(stream, selects, previous, unmatched, len(initial))
        return cast(AsyncIterator[WatchEvent[T]], selected)

    async def create(self, obj: T, dry_run: bool = False) -> T:
        k = self._kind(type(obj))
        res = k.resource
        meta = obj.metadata
        if not meta.name:
            raise Invalid(f"{res.kind}: metadata.name is required")
        if res.namespaced and not meta.namespace:
            raise Invalid(f"{res.kind} {meta.name}: metadata.namespace is required")
        if meta.resource_version:
            raise Invalid("resourceVersion should not be set on objects to be created")
        key = self._key(res, meta.name, meta.namespace)
        if key in k.objects:
            raise AlreadyExists(f'{res.plural} "{meta.name}" already exists')
        new_meta = evolve(
            meta,
            {
                "namespace": key[0],
                "uid": self._new_uid(),
                "generation": 1,
                "creation_timestamp": self._now(),
                "deletion_timestamp": None,
            },
        )
        keep_status = not res.status_subresource or res.kind in _STATUS_ON_CREATE
        candidate = self._assemble(k, obj, new_meta, None if keep_status else NO_STATUS)
        if dry_run:
            return cast(T, candidate)
        self.writes += 1
        if self.event_ttl is not None and res.kind == "Event":
            now = self._now()
            self._expire_events(k, now)
            self._expiry.append((now + timedelta(seconds=self.event_ttl), key))
        return cast(T, self._commit(k, key, None, candidate))

    async def update(self, obj: T) -> T:
        k = self._kind(type(obj))
        stored = self._stored(k, obj.metadata.name, obj.metadata.namespace)
        self._precondition(k, stored, obj.metadata.resource_version)
        self.writes += 1
        keep = stored if k.resource.status_subresource else None
        return cast(T, self._replace(k, stored, obj, keep))

    async def update_status(self, obj: T) -> T:
        k = self._kind(type(obj))
        if not k.resource.status_subresource:
            raise NotFound(f"{k.resource.plural} has no status subresource")
        stored = self._stored(k, obj.metadata.name, obj.metadata.namespace)
        self._precondition(k, stored, obj.metadata.resource_version)
        self.writes += 1
        # The status subresource ignores everything but status, metadata included.
        return cast(T, self._replace(k, stored, stored, obj))

    async def patch(self, kind: type[T], name: str, namespace: str, patch: dict[str, Any]) -> T:
        k = self._kind(kind)
        stored = self._stored(k, name, namespace)
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None:
            self._precondition(k, stored, str(rv))
        given = self._parse(k, merge_patch(stored.to_dict(), patch))
        self.writes += 1
        keep = stored if k.resource.status_subresource else None
        return cast(T, self._replace(k, stored, given, keep))

    async def apply(
        self, kind: type[T], obj: dict[str, Any], field_manager: str = "gpu-binder"
    ) -> T:
        k = self._kind(kind)
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        stored = k.objects.get(self._key(k.resource, name, namespace))
        if stored is None:
            fresh = merge_patch(obj, {"metadata": {"resourceVersion": None}})
            return await self.create(cast(T, self._parse(k, fresh)))
        return await self.patch(kind, name, namespace, obj)

    async def delete(self, kind: type[T], name: str, namespace: str = "") -> None:
        k = self._kind(kind)
        stored = self._stored(k, name, namespace)
        self.writes += 1
        self._delete(k, stored)

    # --- for the embedded cluster ------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call callback(kind, event) for every change, in write order, inside the write.

        Writes the callback makes are delivered after the current event reaches every
        subscriber, so all subscribers see one order. Returns the unsubscribe function.
        """
        self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            self._subscribers = tuple(s for s in self._subscribers if s is not callback)

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

    def _expire_events(self, k: _Kind, now: datetime) -> None:
        """Remove Events past their TTL, as etcd leases do: a DELETED event for each."""
        while self._expiry and self._expiry[0][0] <= now:
            _, key = self._expiry.popleft()
            stored = k.objects.get(key)
            if stored is not None:
                self._remove(k, key, self._assemble(k, stored, stored.metadata, None, stored))

    def _kind(self, kind: type[Any]) -> _Kind:
        k = self._kinds.get(kind)
        if k is None:
            k = self._kinds[kind] = _Kind(kind, resource_of(kind), self.history_limit)
        return k

    @staticmethod
    def _key(res: Resource, name: str, namespace: str) -> Key:
        return (namespace if res.namespaced else "", name)

    def _stored(self, k: _Kind, name: str, namespace: str) -> Any:
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
    def _parse(k: _Kind, raw: dict[str, Any]) -> Any:
        try:
            return k.resource.parse(raw)
        except (ValidationError, ValueError, TypeError) as e:
            raise Invalid(f"{k.resource.kind} is invalid: {e}") from None

    def _precondition(self, k: _Kind, stored: Any, resource_version: str) -> None:
        name = stored.metadata.name
        if resource_version != stored.metadata.resource_version or self._loses_race(k, stored):
            raise Conflict(
                f'Operation cannot be fulfilled on {k.resource.plural} "{name}": the object '
                "has been modified; please apply your changes to the latest version and try again"
            )

    def _loses_race(self, k: _Kind, stored: Any) -> bool:
        """Whether an injected concurrent writer wins; if so, its write is stored first."""
        if not self._conflicts.loses(k.resource.kind, stored):
            return False
        meta = stored.metadata
        self._commit(k, self._key(k.resource, meta.name, meta.namespace), stored, stored)
        return True

    def _assemble(
        self, k: _Kind, given: Any, meta: ObjectMeta, status_of: Any, stored: Any = None
    ) -> Any:
        return assemble(given, meta, status_of, stored, lambda raw: self._parse(k, raw))

    def _replace(self, k: _Kind, stored: Any, given: Any, status_of: Any) -> Any:
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
        candidate = self._assemble(k, given, meta, status_of, stored)
        if same(candidate, stored):
            return stored
        key = (old.namespace, old.name)
        if old.deletion_timestamp is not None and not meta.finalizers:
            return self._remove(k, key, candidate)
        return self._commit(k, key, stored, candidate)

    def _delete(self, k: _Kind, stored: Any) -> None:
        meta = stored.metadata
        key = (meta.namespace, meta.name)
        if not meta.finalizers:
            self._remove(k, key, self._assemble(k, stored, meta, None, stored))
        elif meta.deletion_timestamp is None:
            marked = evolve(meta, {"deletion_timestamp": self._now()})
            self._commit(k, key, stored, self._assemble(k, stored, marked, None, stored))

    def _stamp(self, candidate: Any) -> tuple[int, Any]:
        self._rv += 1
        return self._rv, stamp(candidate, str(self._rv))

    def _commit(self, k: _Kind, key: Key, stored: Any, candidate: Any) -> Any:
        if stored is candidate:
            candidate = self._assemble(k, stored, stored.metadata, None, stored)
        rv, new = self._stamp(candidate)
        k.objects[key] = new
        self._owners.follow((k, key), stored.metadata if stored is not None else None, new.metadata)
        k.remember(rv, stored)
        self._emit(k, "ADDED" if stored is None else "MODIFIED", rv, new)
        return new

    def _remove(self, k: _Kind, key: Key, candidate: Any) -> Any:
        rv, gone = self._stamp(candidate)
        stored = k.objects.pop(key)
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
    def _meta_of(entry: tuple[_Kind, Key]) -> ObjectMeta | None:
        obj = entry[0].objects.get(entry[1])
        return obj.metadata if obj is not None else None

    def _emit(self, k: _Kind, type_: EventType, rv: int, obj: Any) -> None:
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
                for callback in self._subscribers:
                    callback(kind, ev)
        finally:
            self._dispatching = False


if TYPE_CHECKING:
    _conforms: Client = MemoryClient()
