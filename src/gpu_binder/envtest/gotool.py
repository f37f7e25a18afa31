"""A command-line tool the tests need (helm, promtool), found or built once from Go source.

Order, as for kube-apiserver and etcd (:mod:`gpu_binder.envtest.assets`):

1. ``GPU_BINDER_<TOOL>``: a binary to use as it is;
2. ``~/.cache/gpu-binder/<tool>/<version>/<tool>`` (``GPU_BINDER_CACHE`` moves the root);
3. if ``go`` is on ``PATH``: ``go install <package>@<version>`` from the Go module proxy
   into that directory, once per machine, under a lock, the binary moved in whole;
4. otherwise :class:`AssetsUnavailable`, whose message says in one line how to enable it.

``GPU_BINDER_<TOOL>_VERSION`` picks another release than the tool's default.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .assets import AssetsBuildError, AssetsUnavailable, Progress, cache_root

# The -ldflags of a build, from the module's go.mod text and the version being built.
Stamp = Callable[[str, str], str]


def _no_stamp(go_mod: str, version: str) -> str:
    return "-s -w"


@dataclass(frozen=True)
class GoTool:
    name: str
    # The Go module and the package of its main, e.g. helm.sh/helm/v3, .../cmd/helm.
    module: str
    package: str
    default_version: str
    # What a build takes long: said before it starts.
    duration: str = "a few minutes on 2 cores"
    stamp: Stamp = _no_stamp

    @property
    def env(self) -> str:
        return f"GPU_BINDER_{self.name.upper()}"

    @property
    def how_to_enable(self) -> str:
        return (
            f"to enable, set {self.env} to a {self.name} binary, or install Go "
            f"(`go install {self.package}` then builds it once)"
        )

    def version(self) -> str:
        return os.environ.get(f"{self.env}_VERSION") or self.default_version

    def cache_dir(self, version: str | None = None) -> Path:
        return cache_root() / self.name / (version or self.version())

    def find(self, version: str | None = None) -> Path | None:
        """The binary from the environment or the cache, without building anything.

        None when neither has it; :class:`AssetsUnavailable` when the variable names a
        file that is not an executable.
        """
        named = os.environ.get(self.env)
        if named:
            if not executable(Path(named)):
                raise AssetsUnavailable(
                    f"{self.env}={named} is not an executable file; unset it or fix it"
                )
            return Path(named)
        cached = self.cache_dir(version) / self.name
        return cached if executable(cached) else None

    def build(self, version: str | None = None, *, progress: Progress | None = None) -> Path:
        """Build the tool with Go into its cache directory; the binary's path.

        One build per version at a time (a lock file); a build that finds the binary there
        (another process made it meanwhile) builds nothing.
        """
        version = version or self.version()
        say = progress or _default_progress
        if shutil.which("go") is None:
            raise AssetsUnavailable(f"no {self.name} and no Go on PATH; {self.how_to_enable}")
        out_dir = self.cache_dir(version)
        out_dir.mkdir(parents=True, exist_ok=True)
        binary = out_dir / self.name
        log = cache_root() / "build" / f"{self.name}-{version}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with (out_dir.parent / f".{version}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if executable(binary):
                return binary
            log.write_text("")
            say(
                f"gpu-binder: building {self.name} {version} with Go (once per machine, "
                f"{self.duration}); log: {log}"
            )
            started = time.monotonic()
            env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GO111MODULE="on")
            meta = json.loads(
                go(["mod", "download", "-json", f"{self.module}@{version}"], env, out_dir, log)
            )
            ldflags = self.stamp(Path(meta["GoMod"]).read_text(encoding="utf-8"), version)
            with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
                env["GOBIN"] = tmp
                args = ["install", "-trimpath", "-ldflags", ldflags, f"{self.package}@{version}"]
                go(args, env, out_dir, log)
                # Whole or not at all: a reader never sees half a binary.
                os.replace(Path(tmp) / self.name, binary)
        took = time.monotonic() - started
        say(f"gpu-binder: {self.name} {version} built in {took:.0f} s: {binary}")
        return binary

    def ensure(
        self, version: str | None = None, *, build: bool = True, progress: Progress | None = None
    ) -> Path:
        """The binary from the environment or the cache, built with Go when allowed.

        :class:`AssetsUnavailable` (one line saying how to enable it) when it can be
        neither found nor built, :class:`AssetsBuildError` when a build fails.
        """
        found = self.find(version)
        if found is not None:
            return found
        if not build:
            raise AssetsUnavailable(f"no {self.name}; {self.how_to_enable}")
        return self.build(version, progress=progress)

    def main(self) -> int:
        """`python -m gpu_binder.envtest.<tool>`: print the path, building when needed."""
        try:
            print(self.ensure())
        except (AssetsUnavailable, AssetsBuildError) as e:
            print(f"gpu-binder: {e}", file=sys.stderr)
            return 1
        return 0


def executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def go(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> str:
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


def _default_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
