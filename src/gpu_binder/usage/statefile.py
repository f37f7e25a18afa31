"""The state file of `gpu-binder usage --since-last FILE` (usage.export): read at the
start, written only once the report is out, replaced atomically, and locked for the
whole run, so a crash or a second export started meanwhile never bills a second twice.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from gpu_binder.usage.export import State, StateError, first

_staged: dict[Path, State] = {}


class Refused(Exception):
    """A state file (or its absence) that this run cannot go on from; says why."""


def load(path: Path, start: datetime | None, scope: dict[str, str | None]) -> State:
    """The state the last export left in path; a first export's when there is none."""
    if not path.exists():
        if start is None:
            raise Refused(f"{path} does not exist: the first export needs --from")
        return first(start, scope)
    if start is not None:
        raise Refused(
            f"{path} holds where the last export ended; --from starts a first export only"
        )
    try:
        state = State.from_json(path.read_text())
    except (OSError, StateError) as e:
        raise Refused(f"{path} cannot be read as an export's state: {e}") from None
    if state.scope != scope:
        raise Refused(
            f"{path} was written by an export of {_said(state.scope)}, not {_said(scope)}"
        )
    return state


def _said(scope: dict[str, str | None]) -> str:
    ns = scope.get("namespace")
    return f"{'namespace ' + ns if ns else 'all namespaces'}, kind {scope.get('kind')}"


def stage(path: Path, state: State) -> None:
    """Remember the state to write once the report is printed."""
    _staged[path] = state


def commit(path: Path) -> None:
    """Write the staged state: a new file, then renamed over the old in one step."""
    state = _staged.pop(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(state.to_json())
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextmanager
def locked(path: Path | None) -> Iterator[None]:
    """Hold an exclusive lock beside path (FILE.lock) for the run; none without a path."""
    if path is None:
        yield
        return
    with path.with_name(f"{path.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
