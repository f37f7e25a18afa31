"""AdmissionReview v1 in and out: malformed input is a BadReview, responses echo the uid."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from gpu_binder.webhook.review import BadReview, allowed, denied, parse_review, review_request


def body(**request: Any) -> dict[str, Any]:
    """A review of CREATE vm1 in tenant-a, with request fields replaced by request."""
    review = review_request({"metadata": {"name": "vm1"}}, uid="u-1", namespace="tenant-a")
    review["request"].update(request)
    return review


def test_the_request_built_for_the_api_server_side_parses_back() -> None:
    vmi = {"metadata": {"name": "vm1", "namespace": "t"}}
    req = parse_review(review_request(vmi, uid="u-2", dry_run=True))
    assert (req.uid, req.operation, req.kind, req.namespace, req.dry_run, req.object) == (
        "u-2",
        "CREATE",
        "VirtualMachineInstance",
        "t",
        True,
        vmi,
    )


def test_a_request_is_parsed_into_its_fields() -> None:
    req = parse_review(body(dryRun=True))
    assert (req.uid, req.operation, req.kind, req.group, req.namespace, req.dry_run) == (
        "u-1",
        "CREATE",
        "VirtualMachineInstance",
        "kubevirt.io",
        "tenant-a",
        True,
    )
    assert req.object == {"metadata": {"name": "vm1"}}


def test_a_review_that_is_not_an_object_is_bad() -> None:
    with pytest.raises(BadReview, match="must be a JSON object, not list"):
        parse_review([])


def test_a_review_without_a_request_is_bad() -> None:
    with pytest.raises(BadReview, match="no request"):
        parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})


def test_a_request_without_a_uid_is_bad() -> None:
    review = body()
    del review["request"]["uid"]
    with pytest.raises(BadReview, match=r"request\.uid is missing"):
        parse_review(review)


def test_a_request_whose_object_is_not_an_object_is_bad() -> None:
    with pytest.raises(BadReview, match=r"request\.object must be an object, not str"):
        parse_review(body(object="vm1"))


def test_a_review_of_another_api_version_is_bad() -> None:
    review = body()
    review["apiVersion"] = "admission.k8s.io/v1beta1"
    with pytest.raises(BadReview, match="not served"):
        parse_review(review)


def test_a_bad_review_carries_its_reason() -> None:
    with pytest.raises(BadReview) as caught:
        parse_review("not json")
    assert caught.value.reason == "an AdmissionReview must be a JSON object, not str"


def test_an_allowed_response_carries_a_base64_json_patch_and_echoes_the_uid() -> None:
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]
    out = allowed("u-1", ops)
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == "u-1"
    assert out["response"]["allowed"] is True
    assert out["response"]["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(out["response"]["patch"])) == ops


def test_an_allowed_response_without_changes_carries_no_patch() -> None:
    assert allowed("u-1")["response"] == {"uid": "u-1", "allowed": True}


def test_a_denied_response_has_code_403_and_the_message() -> None:
    out = denied("u-1", "no GPUs for you")
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["response"]["uid"] == "u-1"
    assert out["response"]["allowed"] is False
    assert out["response"]["status"]["code"] == 403
    assert out["response"]["status"]["message"] == "no GPUs for you"
