"""Applying a JSONPatch (RFC 6902) the way the API server applies a webhook's patch: a
missing parent, or replacing a member that is not there, is an error."""

from __future__ import annotations

import copy
from typing import Any


def _tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in ops:
        tokens = _tokens(op["path"])
        parent: Any = out
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        kind = op["op"]
        if kind in ("add", "replace"):
            value = copy.deepcopy(op["value"])
            if isinstance(parent, list):
                if last == "-":
                    parent.append(value)
                elif kind == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            elif kind == "replace" and last not in parent:
                raise KeyError(f"replace of missing member {op['path']}")
            else:
                parent[last] = value
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last)
        else:
            raise ValueError(f"unsupported JSONPatch op {kind!r}")
    return out
