"""Object metadata shared by every kind, parsed once from the API's camelCase dicts."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

_Owner = TypeVar("_Owner")


class Model(BaseModel):
    """Base of every API model: camelCase on the wire, immutable in memory."""

    model_config = ConfigDict(
        frozen=True, populate_by_name=True, alias_generator=to_camel, extra="ignore"
    )

    def to_dict(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase, no empty fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OwnerReference(Model):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Model):
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()

    def owner(self, kind: str) -> OwnerReference | None:
        """The controller owner of this kind, or the first owner of it."""
        owners = [o for o in self.owner_references if o.kind == kind]
        return controller_or_first(owners, lambda o: bool(o.controller))


def controller_or_first(
    owners: Sequence[_Owner], is_controller: Callable[[_Owner], bool]
) -> _Owner | None:
    """The owner among these that is the controller, else the first; None when none is.
    For typed references and for the raw ones of an admission review alike."""
    return next((o for o in owners if is_controller(o)), owners[0] if owners else None)


# A bound for generations: int64 in the API, but the API server reads schema bounds as
# float64, where 2^63 - 1 is no integer; 2^62 is never reached.
GENERATION_MAX = 1 << 62


class Condition(Model):
    # metav1.Condition's bounds.
    type: str = Field(max_length=316)
    status: str = Field(max_length=16)
    reason: str = Field("", max_length=1024)
    message: str = Field("", max_length=32768)
    last_transition_time: datetime | None = None
    observed_generation: int | None = Field(None, ge=0, le=GENERATION_MAX)


def set_condition(conditions: tuple[Condition, ...], new: Condition) -> tuple[Condition, ...]:
    """Replace the condition of new's type, keeping its transition time if its status held."""
    out: list[Condition] = []
    placed = False
    for c in conditions:
        if c.type != new.type:
            out.append(c)
            continue
        placed = True
        if c.status == new.status and c.reason == new.reason and c.message == new.message:
            out.append(c)
        elif c.status == new.status:
            out.append(new.model_copy(update={"last_transition_time": c.last_transition_time}))
        else:
            out.append(new)
    if not placed:
        out.append(new)
    return tuple(out)


def field_written_at(meta: Any, path: Sequence[str]) -> datetime | None:
    """When the API server stored the last write that changed the field at `path` (such as
    ("status", "phase")), to the second, by its own clock: the time of the managedFields
    entry that owns the field. An Update takes ownership of every field it changes, and its
    entry's time is the server's now whenever it changes any field it owns
    (k8s.io/apimachinery pkg/util/managedfields/internal/managedfieldsupdater.go, Update),
    so the field's write came no later than that second's end. None without such an entry
    (managedFields stripped or malformed, or nobody wrote the field); the latest time when
    several own it (a field applied by several managers)."""
    entries = meta.get("managedFields") if isinstance(meta, dict) else None
    found: datetime | None = None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or not _owns(entry.get("fieldsV1"), path):
            continue
        try:
            at = datetime.fromisoformat(str(entry.get("time") or "").replace("Z", "+00:00"))
        except ValueError:
            continue
        found = at if found is None else max(found, at)
    return utc(found) if found is not None else None


def _owns(fields: Any, path: Sequence[str]) -> bool:
    """Whether a FieldsV1 set holds the field at path (`{"f:status": {"f:phase": {}}}`)."""
    for name in path:
        if not isinstance(fields, dict):
            return False
        fields = fields.get(f"f:{name}")
    return isinstance(fields, dict)


def utc(t: datetime) -> datetime:
    """Times are compared in UTC; a naive time from a test is taken as UTC."""
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


@functools.lru_cache(maxsize=256)
def parse_duration(text: str) -> timedelta:
    """A Go duration such as `90s`, `1h30m` or `500ms` (the form metav1.Duration uses)."""
    if not text or _DURATION.sub("", text) != "":
        raise ValueError(f"invalid duration {text!r}: use Go form such as 30s, 5m, 1h30m")
    total = 0.0
    unit = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    for number, suffix in _DURATION.findall(text):
        total += float(number) * unit[suffix]
    try:
        return timedelta(seconds=total)
    except OverflowError:
        # `99999999999999999999h`: a ValueError like any other bad duration, which the
        # callers handle (the flags say so; a class's reservation is clamped).
        raise ValueError(f"duration {text!r} is too long") from None


DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|h|m|s))+$"
