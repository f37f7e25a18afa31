"""MemoryClient: the Client protocol on an in-memory store that keeps the API server's semantics.

resourceVersion from one global counter, 409 on a stale write, the status subresource kept
apart from the object, finalizers and deletionTimestamp, ownerReference garbage collection,
label selectors (on lists and watches), merge patch, simplified server-side apply, and
watches with a bounded history. The store (sim.store) holds typed, immutable objects;
`list` and `get` return them as stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from gpu_binder.api.kinds import T
from gpu_binder.api.pod import Pod
from gpu_binder.client.errors import AlreadyExists, Conflict, Invalid, NotFound
from gpu_binder.client.interface import Client, ListResult, WatchEvent
from gpu_binder.sim.builders import iso
from gpu_binder.sim.merge import merge_patch
from gpu_binder.sim.objects import NO_STATUS, evolve, stamp
from gpu_binder.sim.selectors import parse_selector, selector_matcher, selector_matches
from gpu_binder.sim.store import Key, Store
from gpu_binder.sim.watch import Selected

# The core Node keeps the status it is created with; custom resources drop it.
_STATUS_ON_CREATE = frozenset({"Node"})


def _matcher(label_selector: str) -> Callable[[Mapping[str, str]], bool]:
    """The selector's function, once per list (a relist of records calls it on each)."""
    try:
        return selector_matcher(label_selector)
    except ValueError as e:
        raise Invalid(str(e)) from None


def _lacked(label_selector: str) -> str | None:
    """A label key the selector requires absent, if any (after _matcher validated it)."""
    for r in parse_selector(label_selector):
        if r.op == "!exists":
            return r.key
    return None


class MemoryClient(Store):
    """An in-memory API server for the embedded cluster, tests and benchmarks."""

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
        selects = _matcher(label_selector) if label_selector else None
        objects: Iterable[tuple[Key, Any]] = k.objects.items()
        lacked = _lacked(label_selector) if label_selector else None
        if lacked is not None:
            # Only the objects without that label can match ("!key"): those the kind keeps.
            objects = [(key, k.objects[key]) for key in k.without_label(lacked)]
        # Selected first, then sorted by key: a selective list of a big kind sorts little.
        chosen = [
            (key, obj)
            for key, obj in objects
            if (not namespace or key[0] == namespace)
            and (selects is None or selects(obj.metadata.labels))
        ]
        chosen.sort(key=itemgetter(0))
        return ListResult(items=[obj for _, obj in chosen], resource_version=str(self._rv))

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
        candidate = self._assemble(
            k, obj, new_meta, None if keep_status else NO_STATUS, written=True
        )
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

    async def bind_pod(self, pod: Pod, node: str) -> Pod:
        """The pods/binding subresource, as kube-scheduler binds: spec.nodeName, once, and
        the PodScheduled condition True, stamped by the server's clock in the same write
        (kubernetes pkg/registry/core/pod/storage/storage.go,
        BindingREST.setPodNodeAndMetadata, by podutil.UpdatePodCondition)."""
        k = self._kind(Pod)
        stored = self._stored(k, pod.metadata.name, pod.metadata.namespace)
        self._precondition(k, stored, pod.metadata.resource_version)
        if stored.node_name:
            raise Conflict(
                f'pod {pod.metadata.name} is already assigned to node "{stored.node_name}"'
            )
        raw = stored.to_dict()
        raw["spec"] = {**raw.get("spec", {}), "nodeName": node}
        status = dict(raw.get("status") or {})
        status["conditions"] = _scheduled(status.get("conditions") or [], self._now())
        raw["status"] = status
        self.writes += 1
        bound = self._parse(k, raw)
        return cast(Pod, self._replace(k, stored, bound, bound))

    async def set_condition(
        self, kind: type[T], name: str, namespace: str, condition: dict[str, Any]
    ) -> T:
        # What the strategic merge patch does: the condition of that type replaced (or
        # appended), the others kept in their order.
        k = self._kind(kind)
        if not k.resource.status_subresource:
            raise NotFound(f"{k.resource.plural} has no status subresource")
        stored = self._stored(k, name, namespace)
        raw = stored.to_dict()
        status = raw.setdefault("status", {})
        conditions = list(status.get("conditions") or [])
        types = [c.get("type") for c in conditions]
        if condition["type"] in types:
            conditions[types.index(condition["type"])] = condition
        else:
            conditions.append(condition)
        status["conditions"] = conditions
        self.writes += 1
        return cast(T, self._replace(k, stored, stored, self._parse(k, raw)))

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

    async def delete(
        self,
        kind: type[T],
        name: str,
        namespace: str = "",
        *,
        grace_period_seconds: int | None = None,
    ) -> None:
        """Delete; a pod running on a node is only marked, until its kubelet deletes it
        again with grace_period_seconds=0."""
        k = self._kind(kind)
        stored = self._stored(k, name, namespace)
        self.writes += 1
        self._delete(k, stored, graceful=grace_period_seconds != 0)


if TYPE_CHECKING:
    _conforms: Client = MemoryClient()


def _scheduled(conditions: list[Any], now: datetime) -> list[Any]:
    """PodScheduled True, its transition time kept if it was True already."""
    kept = [c for c in conditions if not (isinstance(c, dict) and c.get("type") == "PodScheduled")]
    old = next((c for c in conditions if c not in kept), None)
    if isinstance(old, dict) and old.get("status") == "True" and old.get("lastTransitionTime"):
        return [*kept, old]
    return [*kept, {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(now)}]
