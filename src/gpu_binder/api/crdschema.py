"""The structural OpenAPI v3 schema of a kind, from its pydantic model's JSON schema.

The API server demands a structural schema: every node typed, every $ref inlined, no
constructs it cannot prune by. The kind's CEL rules (:mod:`gpu_binder.api.crdkinds`) are
placed on the nodes they name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from gpu_binder.api.crdkinds import KindSpec
from gpu_binder.api.types import GROUP, VERSION

Schema = dict[str, Any]

# Keywords that mean the same in pydantic's JSON schema and in a CRD's OpenAPI v3 schema.
_PASSTHROUGH = frozenset(
    {
        "description",
        "type",
        "format",
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
    }
)
# Keywords dropped: titles are noise in a CRD, `readOnly` (of a computed field) is no
# keyword of a CRD's schema, and `additionalProperties: false` is what the API server's
# pruning does anyway (a CRD may not say it).
_DROPPED = frozenset({"title", "readOnly"})
_CONDITION_REF = "#/$defs/Condition"


def _ref_name(ref: str) -> str:
    prefix = "#/$defs/"
    if not ref.startswith(prefix):
        raise ValueError(f"unsupported $ref {ref!r}: only local $defs can be inlined")
    return ref[len(prefix) :]


def _drop_none(value: Any) -> Any:
    """Defaults as the binder writes objects: no null fields (to_dict excludes None)."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _convert(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Schema:
    """One JSON-schema node as a structural OpenAPI v3 node, with every $ref inlined."""
    out: Schema = {}
    if "$ref" in node:
        out.update(_convert(defs[_ref_name(node["$ref"])], defs))
    if "anyOf" in node:
        choices = [c for c in node["anyOf"] if c != {"type": "null"}]
        if len(choices) != 1 or len(node["anyOf"]) != 2:
            raise ValueError(f"only `X | None` unions can be structural, not {node['anyOf']}")
        out.update(_convert(choices[0], defs))
        # The API server refuses null for an enum even when nullable, so an optional enum
        # stays non-nullable: the server then prunes a null, which reads back as None.
        if "enum" not in out:
            out["nullable"] = True
    for key, value in node.items():
        if key in ("$ref", "anyOf") or key in _DROPPED:
            continue
        if key in _PASSTHROUGH:
            out[key] = list(value) if isinstance(value, list) else value
        elif key == "default":
            if value is not None:
                out["default"] = _drop_none(value)
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out.update(minimum=value, exclusiveMinimum=True)
        elif key == "exclusiveMaximum":
            out.update(maximum=value, exclusiveMaximum=True)
        elif key == "properties":
            out["properties"] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs)
            if value.get("$ref") == _CONDITION_REF:
                # Conditions are a map keyed by type (as metav1.Condition declares them), so
                # server-side apply merges them per type instead of replacing the list.
                out["x-kubernetes-list-type"] = "map"
                out["x-kubernetes-list-map-keys"] = ["type"]
        elif key == "additionalProperties":
            if isinstance(value, Mapping):
                out["additionalProperties"] = _convert(value, defs)
        else:
            # A construct the CRD cannot express (prefixItems, uniqueItems, allOf...) must
            # fail the generator, not slip into a schema the API server would refuse.
            raise ValueError(f"no structural form for JSON-schema keyword {key!r} in {node}")
    if "type" not in out:
        raise ValueError(f"schema node without a type is not structural: {node}")
    return out


def _sorted(value: Any) -> Any:
    """Keys sorted at every level, so the output does not depend on construction order."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _node_at(schema: Schema, path: Sequence[str]) -> Schema:
    node = schema
    for step in path:
        try:
            node = node["items"] if step == "[]" else node["properties"][step]
        except KeyError:
            raise KeyError(f"no schema node at {'.'.join(path)} (missing {step!r})") from None
    return node


def structural_schema(spec: KindSpec) -> Schema:
    """The openAPIV3Schema of one kind: the model's schema made structural, plus its rules."""
    # As the models serialize: computed fields (GPUDeviceStatus.vm) are written, so the
    # API server must keep them; otherwise the same schema as for validation.
    raw = spec.model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.get("$defs", {})
    properties: dict[str, Schema] = {}
    for name, sub in raw["properties"].items():
        if name == "apiVersion":
            properties[name] = {
                "type": "string",
                "description": f"The versioned schema of this object: {GROUP}/{VERSION}.",
            }
        elif name == "kind":
            properties[name] = {
                "type": "string",
                "description": f"The REST resource this object represents: {spec.kind}.",
            }
        elif name == "metadata":
            # The API server owns metadata's schema; a CRD may only say it is an object.
            properties[name] = {"type": "object"}
        else:
            properties[name] = _convert(sub, defs)
    schema: Schema = {
        "type": "object",
        "description": spec.description,
        "properties": properties,
        "required": [r for r in raw.get("required", ()) if r != "metadata"],
    }
    for path, rules in spec.rules.items():
        node = _node_at(schema, path)
        node.setdefault("x-kubernetes-validations", []).extend(r.to_dict() for r in rules)
    return cast(Schema, _sorted(schema))
