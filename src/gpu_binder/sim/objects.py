"""How the store copies, compares and stamps typed objects, quickly and without sharing
anything a caller could change later."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, cast

import orjson
from pydantic import BaseModel

from gpu_binder.api.meta import ObjectMeta

# Marks "write the kind's empty status" where a status source is expected.
NO_STATUS: Any = object()
_set = object.__setattr__


def json_copy(raw: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, so a caller changing its dict later cannot change the store."""
    return cast(dict[str, Any], orjson.loads(orjson.dumps(raw)))


def evolve(obj: Any, update: dict[str, Any]) -> Any:
    """A copy of a frozen model with fields replaced, unvalidated: model_copy at a third of
    the cost, which matters because every write makes several."""
    if obj.__pydantic_extra__ or obj.__pydantic_private__:
        return obj.model_copy(update=update)
    cls = obj.__class__
    new = cls.__new__(cls)
    fields = obj.__dict__.copy()
    fields.update(update)
    fields_set = obj.__pydantic_fields_set__
    if not fields_set.issuperset(update):
        fields_set = fields_set | update.keys()
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_fields_set__", fields_set)
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


@cache
def _empty_status(model: type[BaseModel]) -> Any:
    return model.model_fields["status"].get_default(call_default_factory=True)


def spec_of(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return getattr(obj, "spec", None)
    raw = getattr(obj, "raw", None)
    return raw.get("spec") if isinstance(raw, dict) else None


def same(a: Any, b: Any) -> bool:
    """Whether two versions of an object are equal on the wire."""
    if isinstance(a, BaseModel):
        return bool(a == b)
    ra, rb = getattr(a, "raw", None), getattr(b, "raw", None)
    if not isinstance(ra, dict) or not isinstance(rb, dict):
        return bool(a == b)
    # Dataclass views leave `raw` out of __eq__, so the wire bodies are compared.
    return bool(a.metadata == b.metadata) and _without_meta(ra) == _without_meta(rb)


def _without_meta(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k != "metadata"}


def _body(obj: Any, trusted: bool = True) -> dict[str, Any]:
    """obj's wire form with a fresh top level; a deep copy unless trusted (stored)."""
    raw = getattr(obj, "raw", None)
    if not isinstance(raw, dict):
        return cast(dict[str, Any], obj.to_dict())  # views built from fields copy them
    return dict(raw) if trusted else json_copy(_without_meta(raw))


def assemble(
    given: Any,
    meta: ObjectMeta,
    status_of: Any,
    stored: Any,
    parse: Callable[[dict[str, Any]], Any],
) -> Any:
    """A private copy of given with meta, and the status of status_of (None: given's own,
    NO_STATUS: the kind's empty one). Parts of the stored object are shared, not copied:
    it never changes."""
    if isinstance(given, BaseModel):
        update: dict[str, Any] = {"metadata": meta}
        if status_of is NO_STATUS:
            update["status"] = _empty_status(type(given))
        elif status_of is not None:
            update["status"] = status_of.status
        return evolve(given, update)
    raw = _body(given, trusted=given is stored)
    raw["metadata"] = _meta_dict(meta, stored)
    if status_of is not None:
        status = None if status_of is NO_STATUS else _status_of(status_of)
        if status is None:
            raw.pop("status", None)
        else:
            raw["status"] = status if status_of is stored else json_copy(status)
    return parse(raw)


def _meta_dict(meta: ObjectMeta, stored: Any) -> dict[str, Any]:
    """meta's wire form: the stored object's own when meta is its (a stored view's raw
    metadata is always its metadata's wire form, and never changes), else serialised."""
    if stored is not None and meta is stored.metadata:
        raw = getattr(stored, "raw", None)
        if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict):
            return cast(dict[str, Any], raw["metadata"])
    return meta.to_dict()


def _status_of(obj: Any) -> Any:
    raw = getattr(obj, "raw", None)
    return raw.get("status") if isinstance(raw, dict) else obj.to_dict().get("status")


def stamp(candidate: Any, resource_version: str) -> Any:
    """A private candidate (from assemble) with its resourceVersion set, in place: nobody
    else holds it yet, and a copy would cost as much as the write's parse."""
    meta = evolve(candidate.metadata, {"resource_version": resource_version})
    if isinstance(candidate, BaseModel):
        candidate.__dict__["metadata"] = meta
        return candidate
    raw = getattr(candidate, "raw", None)
    if isinstance(raw, dict):
        # A new metadata dict: the one assemble put there may be the stored object's.
        raw["metadata"] = {**raw.get("metadata", {}), "resourceVersion": resource_version}
    _set(candidate, "metadata", meta)
    return candidate
