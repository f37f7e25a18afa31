"""Locating (and, when needed, building) the ``helm`` binary for the chart's tests.

Order, as for kube-apiserver and etcd (:mod:`gpu_binder.envtest.assets`):

1. ``GPU_BINDER_HELM``: a helm binary to use as it is;
2. ``~/.cache/gpu-binder/helm/<version>/helm`` (``GPU_BINDER_CACHE`` moves the root);
3. if ``go`` is on ``PATH``: ``go install helm.sh/helm/v3/cmd/helm@<version>`` from the Go
   module proxy into that directory, once per machine (a few minutes on 2 cores), with the
   version and Kubernetes version stamped in as helm's own Makefile does;
4. otherwise :class:`AssetsUnavailable`, whose message says in one line how to enable it.

``GPU_BINDER_HELM_VERSION`` picks another release than :data:`DEFAULT_HELM_VERSION`.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .assets import AssetsBuildError, AssetsUnavailable, Progress, cache_root

__all__ = [
    "DEFAULT_HELM_VERSION",
    "HELM_HOW_TO_ENABLE",
    "build_helm",
    "ensure_helm",
    "find_helm",
    "helm_cache_dir",
    "helm_version",
]

DEFAULT_HELM_VERSION = "v3.22.0"
MODULE = "helm.sh/helm/v3"

HELM_HOW_TO_ENABLE = (
    "to enable, set GPU_BINDER_HELM to a helm v3 binary, or install Go "
    f"(`go install {MODULE}/cmd/helm` then builds it once)"
)


def helm_version() -> str:
    """The helm release to use: ``GPU_BINDER_HELM_VERSION`` or the default."""
    return os.environ.get("GPU_BINDER_HELM_VERSION") or DEFAULT_HELM_VERSION


def helm_cache_dir(version: str | None = None) -> Path:
    """Where the build puts the helm binary of ``version``."""
    return cache_root() / "helm" / (version or helm_version())


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_helm(version: str | None = None) -> Path | None:
    """helm from the environment or the cache, without building anything.

    Returns None when neither has it; raises :class:`AssetsUnavailable` when
    ``GPU_BINDER_HELM`` names a file that is not an executable.
    """
    named = os.environ.get("GPU_BINDER_HELM")
    if named:
        if not _executable(Path(named)):
            raise AssetsUnavailable(
                f"GPU_BINDER_HELM={named} is not an executable file; unset it or fix it"
            )
        return Path(named)
    cached = helm_cache_dir(version) / "helm"
    return cached if _executable(cached) else None


def _go(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> str:
    """Run `go ARGS`; its stdout, or AssetsBuildError with the tail of the log."""
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ go {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run(
            ["go", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        tail = "".join(log.read_text(encoding="utf-8").splitlines(keepends=True)[-25:])
        raise AssetsBuildError(f"go {args[0]} failed with exit code {proc.returncode}:\n{tail}")
    return proc.stdout


def _kubernetes_minor(go_mod: str) -> str:
    """The Kubernetes minor a helm release is built against: its k8s.io/client-go v0.Y.Z."""
    found = re.search(r"^\s*k8s\.io/client-go\s+v0\.(\d+)\.\d+", go_mod, re.MULTILINE)
    if found is None:
        raise AssetsBuildError("helm's go.mod names no k8s.io/client-go version")
    return found[1]


def _default_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build_helm(version: str | None = None, *, progress: Progress | None = None) -> Path:
    """Build helm ``version`` with Go into its cache directory; return the binary's path.

    One build per version at a time (a lock file); a build that finds the binary already
    there (another process made it meanwhile) builds nothing.
    """
    version = version or helm_version()
    say = progress or _default_progress
    if shutil.which("go") is None:
        raise AssetsUnavailable(f"no helm and no Go on PATH; {HELM_HOW_TO_ENABLE}")
    out_dir = helm_cache_dir(version)
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "helm"
    log = cache_root() / "build" / f"helm-{version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with (out_dir.parent / f".{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _executable(binary):
            return binary
        log.write_text("")
        say(
            f"gpu-binder: building helm {version} with Go (once per machine, a few minutes "
            f"on 2 cores); log: {log}"
        )
        started = time.monotonic()
        env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GO111MODULE="on")
        meta = json.loads(
            _go(["mod", "download", "-json", f"{MODULE}@{version}"], env, out_dir, log)
        )
        minor = _kubernetes_minor(Path(meta["GoMod"]).read_text(encoding="utf-8"))
        # What helm's Makefile stamps in: its version, and the Kubernetes version that
        # `helm template` and `helm lint` assume when no cluster is asked.
        ldflags = " ".join(
            [
                "-s -w",
                f"-X {MODULE}/internal/version.version={version}",
                f"-X {MODULE}/pkg/chartutil.k8sVersionMajor=1",
                f"-X {MODULE}/pkg/chartutil.k8sVersionMinor={minor}",
                f"-X {MODULE}/pkg/lint/rules.k8sVersionMajor=1",
                f"-X {MODULE}/pkg/lint/rules.k8sVersionMinor={minor}",
            ]
        )
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
            env["GOBIN"] = tmp
            args = ["install", "-trimpath", "-ldflags", ldflags, f"{MODULE}/cmd/helm@{version}"]
            _go(args, env, out_dir, log)
            # Whole or not at all: a reader never sees half a binary.
            os.replace(Path(tmp) / "helm", binary)
    say(f"gpu-binder: helm {version} built in {time.monotonic() - started:.0f} s: {binary}")
    return binary


def ensure_helm(
    version: str | None = None, *, build: bool = True, progress: Progress | None = None
) -> Path:
    """helm from the environment or the cache, built with Go when allowed and needed.

    Raises :class:`AssetsUnavailable` (one line saying how to enable it) when it can be
    neither found nor built, :class:`AssetsBuildError` when a build fails.
    """
    found = find_helm(version)
    if found is not None:
        return found
    if not build:
        raise AssetsUnavailable(f"no helm; {HELM_HOW_TO_ENABLE}")
    return build_helm(version, progress=progress)


def main() -> int:
    """`python -m gpu_binder.envtest.helm`: print helm's path, building it when needed."""
    try:
        print(ensure_helm())
    except (AssetsUnavailable, AssetsBuildError) as e:
        print(f"gpu-binder: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
