"""Installing CustomResourceDefinitions on the control plane, and waiting until the API
serves them, as controller-runtime's envtest does."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from .files import crd_files, crds_in
from .process import ControlPlaneError
from .rest import Request, raise_unless_ok

CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install_crds(
    request: Request, paths: Iterable[str | os.PathLike[str]], *, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """Create (or update) the CRDs in YAML/JSON files or directories of them; wait for them.

    Directories are read one level deep (``*.yaml``, ``*.yml``, ``*.json``); documents
    that are not ``CustomResourceDefinition`` are ignored. Returns the stored CRDs.
    """
    crds: list[dict[str, Any]] = []
    for file in crd_files(paths):
        with file.open(encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                crds.extend(crds_in(doc))
    if not crds:
        raise ValueError("no CustomResourceDefinition found in the given paths")
    return install_crd_objects(request, crds, timeout=timeout)


def install_crd_objects(
    request: Request, crds: Iterable[Mapping[str, Any]], *, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """Create-or-update these CRD objects, then wait until discovery serves them."""
    stored: list[dict[str, Any]] = []
    for crd in crds:
        name = crd["metadata"]["name"]
        resp = request("POST", CRD_API, dict(crd))
        if resp.status == 409:
            current = request("GET", f"{CRD_API}/{name}", None)
            raise_unless_ok(current, f"get CRD {name}")
            update = dict(crd)
            update["metadata"] = dict(crd["metadata"])
            update["metadata"]["resourceVersion"] = current.json()["metadata"]["resourceVersion"]
            resp = request("PUT", f"{CRD_API}/{name}", update)
        raise_unless_ok(resp, f"install CRD {name}")
        stored.append(resp.json())
    wait_for_crds(request, stored, timeout=timeout)
    return [request("GET", f"{CRD_API}/{c['metadata']['name']}", None).json() for c in stored]


def wait_for_crds(
    request: Request, crds: Iterable[Mapping[str, Any]], *, timeout: float = 30.0
) -> None:
    """Wait until every served version of each CRD is in discovery and it can be listed.

    Discovery alone is not enough: until the resource's watch cache has initialised,
    requests get ``429 storage is (re)initializing``; so the storage version is also
    listed (``limit=1``) until that answers 200.
    """
    # each pending check: a discovery path and the plural it must list, or a list path
    pending: set[tuple[str, str]] = set()
    for crd in crds:
        spec = crd["spec"]
        plural = spec["names"]["plural"]
        for version in spec["versions"]:
            group_version = f"/apis/{spec['group']}/{version['name']}"
            if version.get("served", True):
                pending.add((group_version, plural))
            if version.get("storage", False):
                pending.add((f"{group_version}/{plural}?limit=1", ""))
    deadline = time.monotonic() + timeout
    while True:
        for check in sorted(pending):
            path, plural = check
            resp = request("GET", path, None)
            if not resp.ok:
                continue
            if not plural or any(r.get("name") == plural for r in resp.json()["resources"]):
                pending.discard(check)
        if not pending:
            return
        if time.monotonic() > deadline:
            waiting = sorted(f"{path} {plural}".strip() for path, plural in pending)
            raise ControlPlaneError(f"CRDs not served after {timeout:.0f} s: {waiting}")
        time.sleep(0.1)
