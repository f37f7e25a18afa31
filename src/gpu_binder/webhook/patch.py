"""The JSONPatch (RFC 6902) that pins an admitted VMI to its devices and their node, and
the node requirement the pod webhook (webhook.pods) pins KubeVirt's pods with.

It only adds and replaces: the user's affinity terms stay, the node requirement is ANDed
into each of them, and missing parents are created, because a patch op fails on a path
whose parent does not exist. A VMI and a Pod keep their affinity at the same place
(spec.affinity), so one function serves both. It also adds the usage finalizer, which holds
the VMI until the binder has closed its usage records.

The VMI's node requirement is a second line, not the pin: under KubeVirt's default
`vmRolloutStrategy: LiveUpdate` the VM controller sets a VM's VMI affinity back to the
template's on its next sync (vm.go `handleAffinityChangeRequest`), usually before the
launcher pod is rendered, and the pod webhook pins the pods themselves. It holds where
nothing reverts it (standalone VMIs, `Stage`, a VM marked RestartRequired), and nothing
this patch writes marks a VM RestartRequired (vm.go `syncRestartRequired` compares the VM
with its own spec saved at the start, never with the VMI).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_binder.api.types import DEVICES_ANNOTATION, USAGE_FINALIZER
from gpu_binder.webhook.pinning import Pinning

Op = dict[str, Any]

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pointer(*tokens: str | int) -> str:
    """A JSON pointer (RFC 6901) with each token escaped: ~ as ~0, / as ~1."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def node_requirement(node: str) -> dict[str, Any]:
    """The node selector requirement that holds a pod on one node by name."""
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def pin_patch(vmi: Mapping[str, Any], pinning: Pinning) -> list[Op]:
    """Rewrite entries to slot resources, require the set's node, name the devices, and
    hold the VMI for its usage records (USAGE_FINALIZER)."""
    ops: list[Op] = [
        {
            "op": "replace",
            "path": pointer("spec", "domain", "devices", e.section, e.index, "deviceName"),
            "value": slot,
        }
        for e, slot in pinning.rewrites
    ]
    ops.extend(affinity_ops(vmi, pinning.node))
    ops.extend(annotation_ops(vmi, DEVICES_ANNOTATION, ",".join(pinning.devices)))
    # After the annotation: that op creates metadata when the VMI has none.
    ops.extend(finalizer_ops(vmi, USAGE_FINALIZER))
    return ops


def affinity_ops(obj: Mapping[str, Any], node: str) -> list[Op]:
    """AND `metadata.name In [node]` into every required node selector term of a VMI's or
    a pod's spec.affinity.

    Terms are ORed, so adding the requirement to each one keeps the user's choice among
    them and adds the node to all; with no terms, one term holding only it is added. A term
    that holds the requirement already is left alone: KubeVirt copies a VMI's affinity into
    its pods, and the pod webhook is called again when a later webhook changed the pod.
    """
    requirement = node_requirement(node)
    created: Any = [{"matchFields": [requirement]}]
    below: list[str] = ["affinity", "nodeAffinity", _REQUIRED, "nodeSelectorTerms"]
    # The innermost value first, so each level wraps what the levels below it need.
    nested = [created]
    for key in reversed(below[1:]):
        nested.insert(0, {key: nested[0]})
    parent: Any = obj.get("spec")
    path: list[str | int] = ["spec"]
    for key, value in zip(below, nested, strict=True):
        if not isinstance(parent, dict):
            return []  # no spec: the object names no devices, so nothing to pin
        current = parent.get(key)
        path.append(key)
        if key == "nodeSelectorTerms" and isinstance(current, list) and current:
            return _and_into_terms(current, path, requirement)
        if key == "nodeSelectorTerms" or not isinstance(current, dict):
            # The first missing level is added with everything below it in one op.
            return [{"op": "add", "path": pointer(*path), "value": value}]
        parent = current
    return []


def _and_into_terms(
    terms: list[Any], path: list[str | int], requirement: dict[str, Any]
) -> list[Op]:
    ops: list[Op] = []
    for i, term in enumerate(terms):
        op: Op
        if not isinstance(term, dict):
            # A null term holds no requirement; it becomes one holding only the node.
            op = {
                "op": "replace",
                "path": pointer(*path, i),
                "value": {"matchFields": [requirement]},
            }
            ops.append(op)
            continue
        fields = term.get("matchFields")
        if isinstance(fields, list) and requirement in fields:
            continue
        if isinstance(fields, list):
            op = {"op": "add", "path": pointer(*path, i, "matchFields", "-"), "value": requirement}
        else:
            op = {"op": "add", "path": pointer(*path, i, "matchFields"), "value": [requirement]}
        ops.append(op)
    return ops


def annotation_ops(vmi: Mapping[str, Any], key: str, value: str) -> list[Op]:
    """Set one annotation, creating metadata.annotations when the VMI has none."""
    meta = vmi.get("metadata")
    if not isinstance(meta, dict):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": {key: value}}}]
    if not isinstance(meta.get("annotations"), dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
    return [{"op": "add", "path": pointer("metadata", "annotations", key), "value": value}]


def finalizer_ops(vmi: Mapping[str, Any], finalizer: str) -> list[Op]:
    """Add one finalizer to metadata.finalizers, keeping those the VMI has.

    One `add` of the whole list: on a missing member it creates it, on an existing one it
    replaces it (RFC 6902 §4.1) with the same names plus this one, so it holds whether or
    not the VMI has finalizers, where an append to `/metadata/finalizers/-` would fail on a
    VMI without any. Needs metadata to exist (a VMI has it; pin_patch makes sure).
    """
    meta = vmi.get("metadata")
    current = meta.get("finalizers") if isinstance(meta, dict) else None
    names = [f for f in current if isinstance(f, str)] if isinstance(current, list) else []
    if finalizer in names:
        return []
    return [{"op": "add", "path": pointer("metadata", "finalizers"), "value": [*names, finalizer]}]
