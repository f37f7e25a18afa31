"""Files the control plane reads and writes: CRD manifests and kubeconfigs."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


def crd_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(
                sorted(f for f in path.iterdir() if f.suffix in (".yaml", ".yml", ".json"))
            )
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such CRD file or directory: {path}")
    return files


def crds_in(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        return []
    if doc.get("kind") == "CustomResourceDefinition":
        if doc.get("apiVersion") != "apiextensions.k8s.io/v1":
            raise ValueError(f"CRD {doc.get('metadata', {}).get('name')}: only v1 is supported")
        return [doc]
    if str(doc.get("kind", "")).endswith("List"):
        return [c for item in doc.get("items") or [] for c in crds_in(item)]
    return []


def write_kubeconfig(
    path: Path, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str
) -> None:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpu-binder-envtest",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(cert_pem),
                    "client-key-data": b64(key_pem),
                },
            }
        ],
        "contexts": [
            {
                "name": "gpu-binder-envtest",
                "context": {"cluster": "gpu-binder-envtest", "user": user},
            }
        ],
        "current-context": "gpu-binder-envtest",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False)
