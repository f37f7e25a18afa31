"""Locating (and, when needed, building) the kube-apiserver and etcd binaries.

Order, as controller-runtime's envtest does it, then gpu-binder's own cache:

1. ``TEST_ASSET_KUBE_APISERVER`` / ``TEST_ASSET_ETCD``: one binary each;
2. ``KUBEBUILDER_ASSETS``: a directory holding ``kube-apiserver`` and ``etcd``;
3. ``~/.cache/gpu-binder/controlplane/<k8s-version>/`` (``GPU_BINDER_CACHE`` moves the root),
   filled by ``scripts/build-controlplane.sh``;
4. if ``go`` is on ``PATH``: run that script (once per machine, many minutes the first time);
5. otherwise :class:`AssetsUnavailable`, whose message says in one line how to enable it.

A binary named explicitly by (1) or (2) that does not exist is an error, not a fallback.

The node path's components (kube-scheduler, kube-controller-manager, kubelet, kwok;
DESIGN.md §7.4) are found the same way (``KUBEBUILDER_ASSETS`` when it holds all four,
then the cache) and built by the same script with ``--node``: :func:`ensure_node_assets`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_K8S_VERSION",
    "DEFAULT_KWOK_VERSION",
    "HOW_TO_ENABLE",
    "NODE_BINARIES",
    "AssetsBuildError",
    "AssetsUnavailable",
    "ControlPlaneAssets",
    "NodeAssets",
    "build_assets",
    "build_script_path",
    "cache_dir",
    "cache_root",
    "ensure_assets",
    "ensure_node_assets",
    "find_assets",
    "find_node_assets",
    "k8s_version",
]

#: The Kubernetes release built by ``scripts/build-controlplane.sh`` (keep the two in step).
DEFAULT_K8S_VERSION = "v1.37.2"
#: The KWOK release the script builds (``GPU_BINDER_KWOK_VERSION``; keep the two in step).
DEFAULT_KWOK_VERSION = "v0.8.0"

HOW_TO_ENABLE = (
    "to enable, set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd, "
    "or install Go (scripts/build-controlplane.sh then builds them once)"
)

APISERVER = "kube-apiserver"
ETCD = "etcd"
NODE_BINARIES = ("kube-scheduler", "kube-controller-manager", "kubelet", "kwok")
NODE_HOW_TO_ENABLE = (
    "to enable, run scripts/build-controlplane.sh --node (Go, once per machine, about "
    "18 min on 2 cores) or put them in KUBEBUILDER_ASSETS"
)
_PROGRESS_PREFIX = "[build-controlplane"

Progress = Callable[[str], None]


class AssetsUnavailable(RuntimeError):
    """No binaries, and no way to build them here (no Go, or no build script)."""


class AssetsBuildError(RuntimeError):
    """The build script ran and failed; the message ends with the tail of its log."""


@dataclass(frozen=True)
class ControlPlaneAssets:
    """Paths of the two binaries and where they came from (for messages)."""

    kube_apiserver: Path
    etcd: Path
    source: str


@dataclass(frozen=True)
class NodeAssets:
    """Paths of the node path's binaries and where they came from."""

    kube_scheduler: Path
    kube_controller_manager: Path
    kubelet: Path
    kwok: Path
    source: str


def k8s_version() -> str:
    """The Kubernetes release to use: ``GPU_BINDER_K8S_VERSION`` or the default."""
    return os.environ.get("GPU_BINDER_K8S_VERSION") or DEFAULT_K8S_VERSION


def cache_root() -> Path:
    """gpu-binder's cache of built tools: ``GPU_BINDER_CACHE`` or ``~/.cache/gpu-binder``."""
    root = os.environ.get("GPU_BINDER_CACHE")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gpu-binder"


def cache_dir(version: str | None = None) -> Path:
    """Where the build script puts the binaries of ``version``."""
    return cache_root() / "controlplane" / (version or k8s_version())


def build_script_path() -> Path:
    """``scripts/build-controlplane.sh`` of this checkout (``GPU_BINDER_BUILD_SCRIPT`` wins)."""
    override = os.environ.get("GPU_BINDER_BUILD_SCRIPT")
    if override:
        return Path(override)
    # src/gpu_binder/envtest/assets.py -> repository root
    return Path(__file__).resolve().parents[3] / "scripts" / "build-controlplane.sh"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _explicit(env: str, name: str) -> Path | None:
    """The binary named by ``env`` or by ``KUBEBUILDER_ASSETS``; raises if named but absent."""
    single = os.environ.get(env)
    if single:
        path = Path(single)
        if not _executable(path):
            raise AssetsUnavailable(f"{env}={single} is not an executable file; unset it or fix it")
        return path
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        path = Path(assets) / name
        if not _executable(path):
            raise AssetsUnavailable(
                f"KUBEBUILDER_ASSETS={assets} has no executable {name}; unset it or fix it"
            )
        return path
    return None


def find_assets(version: str | None = None) -> ControlPlaneAssets | None:
    """The binaries from the environment or the cache, without building anything.

    Returns None when neither names them; raises :class:`AssetsUnavailable` when the
    environment names a binary that is not there.
    """
    apiserver = _explicit("TEST_ASSET_KUBE_APISERVER", APISERVER)
    etcd = _explicit("TEST_ASSET_ETCD", ETCD)
    if apiserver is not None and etcd is not None:
        return ControlPlaneAssets(apiserver, etcd, "environment (KUBEBUILDER_ASSETS/TEST_ASSET_*)")
    cached = cache_dir(version)
    apiserver = apiserver or cached / APISERVER
    etcd = etcd or cached / ETCD
    if _executable(apiserver) and _executable(etcd):
        return ControlPlaneAssets(apiserver, etcd, f"cache {cached}")
    return None


def find_node_assets(version: str | None = None) -> NodeAssets | None:
    """kube-scheduler, kube-controller-manager, kubelet and kwok from ``KUBEBUILDER_ASSETS``
    (when it holds all four) or the cache, without building anything; None if neither."""
    places = [Path(d) for d in [os.environ.get("KUBEBUILDER_ASSETS", "")] if d]
    places.append(cache_dir(version))
    for place in places:
        sched, cm, kubelet, kwok = (place / name for name in NODE_BINARIES)
        if all(_executable(p) for p in (sched, cm, kubelet, kwok)):
            source = "cache" if place == cache_dir(version) else "KUBEBUILDER_ASSETS"
            return NodeAssets(sched, cm, kubelet, kwok, source=f"{source} {place}")
    return None


def _default_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build_assets(
    version: str | None = None,
    *,
    progress: Progress | None = None,
    log_file: Path | None = None,
    node: bool = False,
) -> Path:
    """Run the build script for ``version``; return the directory holding the binaries
    (with ``node``, the node path's four as well).

    The script's own progress lines go to ``progress`` (stderr by default); the Go tool's
    output goes to ``log_file`` (``<cache>/build/<version>/build.log`` by default).
    """
    version = version or k8s_version()
    say = progress or _default_progress
    script = build_script_path()
    if shutil.which("go") is None:
        raise AssetsUnavailable(f"no kube-apiserver/etcd and no Go on PATH; {HOW_TO_ENABLE}")
    if not script.is_file():
        raise AssetsUnavailable(f"no kube-apiserver/etcd and no {script}; {HOW_TO_ENABLE}")
    out_dir = cache_dir(version)
    log_path = log_file or out_dir.parent.parent / "build" / version / "build.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GPU_BINDER_K8S_VERSION=version)
    env["GPU_BINDER_CACHE"] = str(out_dir.parent.parent)
    what = "kube-apiserver, etcd and the node components" if node else "kube-apiserver and etcd"
    say(
        f"gpu-binder: building {what} for Kubernetes {version} with Go "
        f"(once per machine, many minutes on 2 cores); log: {log_path}"
    )
    started = time.monotonic()
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            ["bash", str(script), *(["--node"] if node else [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        assert proc.stderr is not None and proc.stdout is not None
        for line in proc.stderr:
            log.write(line)
            log.flush()
            if line.startswith(_PROGRESS_PREFIX):
                say(line.rstrip("\n"))
        stdout = proc.stdout.read()
        code = proc.wait()
    if code != 0:
        tail = "".join(log_path.read_text(encoding="utf-8").splitlines(keepends=True)[-25:])
        raise AssetsBuildError(f"{script} failed with exit code {code}; last lines:\n{tail}")
    lines = stdout.strip().splitlines()
    built = Path(lines[-1]) if lines else out_dir
    say(f"gpu-binder: {what} built in {time.monotonic() - started:.0f} s: {built}")
    return built


def ensure_assets(
    version: str | None = None,
    *,
    build: bool = True,
    progress: Progress | None = None,
) -> ControlPlaneAssets:
    """Find the binaries, building them with Go when allowed and needed.

    Raises :class:`AssetsUnavailable` (one-line message saying how to enable it) when they
    can be neither found nor built, :class:`AssetsBuildError` when a build fails.
    """
    found = find_assets(version)
    if found is not None:
        return found
    if not build:
        raise AssetsUnavailable(f"no kube-apiserver/etcd; {HOW_TO_ENABLE}")
    build_assets(version, progress=progress)
    found = find_assets(version)
    if found is None:
        raise AssetsBuildError(f"build finished but {cache_dir(version)} lacks the binaries")
    return ControlPlaneAssets(found.kube_apiserver, found.etcd, f"built into {cache_dir(version)}")


def ensure_node_assets(
    version: str | None = None,
    *,
    build: bool = True,
    progress: Progress | None = None,
) -> NodeAssets:
    """Find the node path's binaries, building them with Go when allowed and needed
    (errors as :func:`ensure_assets`)."""
    found = find_node_assets(version)
    if found is not None:
        return found
    if not build:
        raise AssetsUnavailable(f"no {', '.join(NODE_BINARIES)}; {NODE_HOW_TO_ENABLE}")
    if shutil.which("go") is None:
        raise AssetsUnavailable(f"no {', '.join(NODE_BINARIES)} and no Go; {NODE_HOW_TO_ENABLE}")
    build_assets(version, progress=progress, node=True)
    found = find_node_assets(version)
    if found is None:
        raise AssetsBuildError(f"build finished but {cache_dir(version)} lacks the node binaries")
    return found
