"""AdmissionReview v1 on the wire: the request parsed once, and the responses built.

Malformed input raises BadReview, which the HTTPS server answers with a 400; everything
past parsing is answered inside an AdmissionReview, which always echoes the request's uid.
`review_request` builds the API server's side, for the embedded cluster and the tests.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 request the webhook can answer."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    uid: str
    operation: str
    # The object's kind and group as the API server names them, e.g. VirtualMachineInstance.
    kind: str
    group: str
    namespace: str
    dry_run: bool
    # The object as the user wrote it (None for DELETE), which the patch is computed against.
    object: dict[str, Any] | None


def parse_review(review: object) -> AdmissionRequest:
    """The typed request of an AdmissionReview v1 body; BadReview says what is wrong."""
    if not isinstance(review, dict):
        raise BadReview(f"an AdmissionReview must be a JSON object, not {_type(review)}")
    api_version = review.get("apiVersion", REVIEW_API_VERSION)
    if api_version != REVIEW_API_VERSION:
        raise BadReview(f"apiVersion {api_version!r} is not served; use {REVIEW_API_VERSION}")
    kind = review.get("kind", REVIEW_KIND)
    if kind != REVIEW_KIND:
        raise BadReview(f"kind {kind!r} is not {REVIEW_KIND}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing: the response could not be matched to it")
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise BadReview("request.operation is missing")
    kind_ref = request.get("kind") or {}
    if not isinstance(kind_ref, dict):
        raise BadReview(f"request.kind must be an object, not {_type(kind_ref)}")
    obj = request.get("object")
    # DELETE carries its object in oldObject; every other operation must send one.
    if obj is None and operation == "DELETE":
        pass
    elif not isinstance(obj, dict):
        raise BadReview(f"request.object must be an object, not {_type(obj)}")
    namespace = request.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        meta = (obj or {}).get("metadata")
        namespace = meta.get("namespace", "") if isinstance(meta, dict) else ""
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise BadReview(f"request.dryRun must be a boolean, not {_type(dry_run)}")
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        kind=str(kind_ref.get("kind", "")),
        group=str(kind_ref.get("group", "")),
        namespace=str(namespace),
        dry_run=dry_run,
        object=obj,
    )


def review_request(
    obj: Mapping[str, Any],
    *,
    uid: str,
    namespace: str | None = None,
    operation: str = "CREATE",
    dry_run: bool = False,
    group: str = "kubevirt.io",
    version: str = "v1",
    kind: str = "VirtualMachineInstance",
) -> dict[str, Any]:
    """The AdmissionReview the API server sends for obj (in its metadata's namespace
    unless namespace is given)."""
    meta = obj.get("metadata")
    if namespace is None:
        namespace = str(meta.get("namespace", "")) if isinstance(meta, Mapping) else ""
    request = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "operation": operation,
        "namespace": namespace,
        "dryRun": dry_run,
        "object": obj,
    }
    return {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "request": request}


def allowed(
    uid: str, patch: Sequence[dict[str, Any]] = (), warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """Admit, with a JSONPatch when there is anything to change."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode("ascii")
    if warnings:
        response["warnings"] = list(warnings)
    return _review(response)


def denied(uid: str, message: str, code: int = 403) -> dict[str, Any]:
    """Refuse, with the message the user sees in the API server's error."""
    status = {"status": "Failure", "code": code, "reason": "Forbidden", "message": message}
    return _review({"uid": uid, "allowed": False, "status": status})


def _review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}


def _type(value: object) -> str:
    return "null" if value is None else type(value).__name__
