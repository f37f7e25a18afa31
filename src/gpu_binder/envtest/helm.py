"""Locating (and, when needed, building) the ``helm`` binary for the chart's tests.

Found or built as every Go tool of the tests is (:mod:`gpu_binder.envtest.gotool`):
``GPU_BINDER_HELM``, else ``~/.cache/gpu-binder/helm/<version>/helm``, else ``go install
helm.sh/helm/v3/cmd/helm@<version>`` once per machine (a few minutes on 2 cores), with the
version and Kubernetes version stamped in as helm's own Makefile does.
``GPU_BINDER_HELM_VERSION`` picks another release than :data:`DEFAULT_HELM_VERSION`.
"""

from __future__ import annotations

import re
from pathlib import Path

from .assets import AssetsBuildError, Progress
from .gotool import GoTool

__all__ = [
    "DEFAULT_HELM_VERSION",
    "HELM",
    "HELM_HOW_TO_ENABLE",
    "build_helm",
    "ensure_helm",
    "find_helm",
    "helm_cache_dir",
    "helm_version",
]

DEFAULT_HELM_VERSION = "v3.22.0"
MODULE = "helm.sh/helm/v3"


def _kubernetes_minor(go_mod: str) -> str:
    """The Kubernetes minor a helm release is built against: its k8s.io/client-go v0.Y.Z."""
    found = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.\d+", go_mod, re.MULTILINE)
    if found is None:
        raise AssetsBuildError("helm's go.mod names no k8s.io/client-go version")
    return found[1]


def _stamp(go_mod: str, version: str) -> str:
    """What helm's Makefile stamps in: its version, and the Kubernetes version that `helm
    template` and `helm lint` assume when no cluster is asked."""
    minor = _kubernetes_minor(go_mod)
    return " ".join(
        [
            "-s -w",
            f"-X {MODULE}/internal/version.version={version}",
            f"-X {MODULE}/pkg/chartutil.k8sVersionMajor=1",
            f"-X {MODULE}/pkg/chartutil.k8sVersionMinor={minor}",
            f"-X {MODULE}/pkg/lint/rules.k8sVersionMajor=1",
            f"-X {MODULE}/pkg/lint/rules.k8sVersionMinor={minor}",
        ]
    )


HELM = GoTool("helm", MODULE, f"{MODULE}/cmd/helm", DEFAULT_HELM_VERSION, stamp=_stamp)
HELM_HOW_TO_ENABLE = HELM.how_to_enable


def helm_version() -> str:
    """The helm release to use: ``GPU_BINDER_HELM_VERSION`` or the default."""
    return HELM.version()


def helm_cache_dir(version: str | None = None) -> Path:
    """Where the build puts the helm binary of ``version``."""
    return HELM.cache_dir(version)


def find_helm(version: str | None = None) -> Path | None:
    """helm from the environment or the cache, without building anything."""
    return HELM.find(version)


def build_helm(version: str | None = None, *, progress: Progress | None = None) -> Path:
    """Build helm ``version`` with Go into its cache directory; the binary's path."""
    return HELM.build(version, progress=progress)


def ensure_helm(
    version: str | None = None, *, build: bool = True, progress: Progress | None = None
) -> Path:
    """helm from the environment or the cache, built with Go when allowed and needed."""
    return HELM.ensure(version, build=build, progress=progress)


if __name__ == "__main__":
    raise SystemExit(HELM.main())
