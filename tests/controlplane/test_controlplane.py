"""The local control plane answers like a real cluster: version, RBAC, core objects, CRDs."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_binder.envtest import ControlPlane

pytestmark = pytest.mark.controlplane


def _get(url: str, ctx: ssl.SSLContext) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _namespace(cp: ControlPlane) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    resp = cp.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert resp.status == 201, resp.body
    return name


def test_version_with_client_cert_and_anonymously(control_plane: ControlPlane) -> None:
    status, version = _get(control_plane.url + "/version", control_plane.ssl_context())
    assert status == 200
    assert version["gitVersion"].startswith("v1.")
    assert int(version["minor"].rstrip("+")) >= 30

    # no client certificate: anonymous may read /version, but nothing else (RBAC is on)
    anonymous = ssl.create_default_context(cafile=str(control_plane.ca_file))
    status, _ = _get(control_plane.url + "/version", anonymous)
    assert status == 200
    status, body = _get(control_plane.url + "/api/v1/namespaces", anonymous)
    assert status == 403, body


def test_kubeconfig_points_at_the_apiserver(control_plane: ControlPlane) -> None:
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    assert config["clusters"][0]["cluster"]["server"] == control_plane.url
    assert config["current-context"] == "gpu-binder-envtest"
    assert config["users"][0]["user"]["client-key-data"]


def test_configmap_round_trip(control_plane: ControlPlane) -> None:
    cp = control_plane
    ns = _namespace(cp)
    base = f"/api/v1/namespaces/{ns}/configmaps"
    created = cp.request(
        "POST", base, {"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "two"}}
    )
    assert created.status == 201, created.body
    got = cp.request("GET", f"{base}/cfg").json()
    assert got["data"] == {"a": "1", "b": "two"}
    assert got["metadata"]["uid"] == created.json()["metadata"]["uid"]

    # an update carrying a stale resourceVersion conflicts; the fresh one wins
    got["data"]["a"] = "changed"
    assert cp.request("PUT", f"{base}/cfg", got).status == 200
    stale = dict(got, data={"a": "stale"})
    assert cp.request("PUT", f"{base}/cfg", stale).status == 409
    assert cp.request("GET", f"{base}/cfg").json()["data"]["a"] == "changed"

    assert cp.request("DELETE", f"{base}/cfg").status == 200
    assert cp.request("GET", f"{base}/cfg").status == 404


def test_client_cert_user_is_subject_to_rbac(control_plane: ControlPlane) -> None:
    cp = control_plane
    ns = _namespace(cp)
    user = cp.add_user("tenant-alice", groups=["tenants"])
    path = f"/api/v1/namespaces/{ns}/configmaps"
    assert cp.request("GET", path, user=user).status == 403

    role = {
        "metadata": {"name": "read-cm"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "get"]}],
    }
    binding = {
        "metadata": {"name": "tenants-read-cm"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-cm"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "tenants"}],
    }
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    assert cp.request("POST", f"{rbac}/roles", role).status == 201
    assert cp.request("POST", f"{rbac}/rolebindings", binding).status == 201
    assert cp.request("GET", path, user=user).status == 200
    assert cp.request("POST", path, {"metadata": {"name": "x"}}, user=user).status == 403
    assert yaml.safe_load(user.kubeconfig.read_text())["users"][0]["name"] == "tenant-alice"


WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.gpu-binder.io
spec:
  group: test.gpu-binder.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [count]
              properties:
                count: {type: integer, minimum: 0}
            status:
              type: object
              properties:
                phase: {type: string}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: not-a-crd-ignored}
"""


def test_crd_installs_and_is_served(control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    crd_dir = tmp_path / "crds"
    crd_dir.mkdir()
    (crd_dir / "widgets.yaml").write_text(WIDGET_CRD)
    (crd_dir / "README.md").write_text("ignored: not yaml")

    stored = cp.install_crds([crd_dir])
    assert [c["metadata"]["name"] for c in stored] == ["widgets.test.gpu-binder.io"]
    conditions = {c["type"]: c["status"] for c in stored[0]["status"]["conditions"]}
    assert conditions["Established"] == "True"

    discovery = cp.request("GET", "/apis/test.gpu-binder.io/v1alpha1").json()
    assert {"widgets", "widgets/status"} <= {r["name"] for r in discovery["resources"]}

    ns = _namespace(cp)
    base = f"/apis/test.gpu-binder.io/v1alpha1/namespaces/{ns}/widgets"
    widget = {
        "apiVersion": "test.gpu-binder.io/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"count": 2},
    }
    assert cp.request("POST", base, widget).status == 201
    assert cp.request("GET", f"{base}/w1").json()["spec"] == {"count": 2}

    bad = dict(widget, metadata={"name": "w2"}, spec={"count": -1})
    refused = cp.request("POST", base, bad)
    assert refused.status == 422
    assert "spec.count" in refused.json()["message"]

    # installing again is an update, not an error
    again = cp.install_crds([crd_dir / "widgets.yaml"])
    assert again[0]["metadata"]["uid"] == stored[0]["metadata"]["uid"]
