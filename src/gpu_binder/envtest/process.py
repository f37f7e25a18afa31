"""The control plane's child processes: started with their output in a log file, ended
with their parent, probed for health, waited for until ready."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
LOG_TAIL_LINES = 15
# How often a component is started on new ports when one was taken before it bound it.
PORT_RETRIES = 3


class ControlPlaneError(RuntimeError):
    """A component failed to start, stopped early, or a wait timed out."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free on ``host`` a moment ago (envtest's approach; may race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


_PR_SET_PDEATHSIG = 1
_prctl: Any = None
if hasattr(os, "fork") and os.uname().sysname == "Linux":
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        _prctl = None


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL if the parent (thread) dies, leaving no orphan."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Process:
    """One child process with its output in a log file."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, argv: Sequence[str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        in_main = threading.current_thread() is threading.main_thread()
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # its own session: a terminal's Ctrl-C reaches Python, which stops it in order
                start_new_session=True,
                # PDEATHSIG follows the forking *thread*: only safe from the main thread
                preexec_fn=_die_with_parent if in_main else None,
            )

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def pid(self) -> int | None:
        """The process id while it runs (for its CPU account, bench.cpu)."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])


def flag_args(flags: Mapping[str, str | None]) -> list[str]:
    return [f"--{k}={v}" for k, v in flags.items() if v is not None]


def launch(
    name: str,
    binary: Path,
    work: Path,
    flags: Mapping[str, str | None],
    overrides: Mapping[str, str | None],
) -> Process:
    """Start binary with flags, overrides winning (None removes a flag); its output goes
    to work/logs/<name>.log."""
    proc = Process(name, work / "logs" / f"{name}.log")
    proc.start([str(binary), *flag_args({**flags, **overrides})])
    return proc


def https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, ssl.SSLError):
        return False


def apiserver_ready(url: str, ctx: ssl.SSLContext) -> bool:
    return all(https_ok(url + path, ctx) for path in ("/healthz", "/readyz"))


def etcd_healthy(client_url: str) -> bool:
    try:
        with urllib.request.urlopen(client_url + "/health", timeout=2) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def start_ready(
    start: Callable[[], tuple[Process, Callable[[], bool]]],
    what: str,
    timeout: float,
) -> Process:
    """Start a process and wait until its readiness check (what) passes.

    start picks free ports, starts the process and returns it with its check; when a
    port was taken in the meantime, it is started again on new ones. A process that
    fails otherwise is stopped and the error raised as ControlPlaneError.
    """
    last_error, name = "", what
    for _attempt in range(PORT_RETRIES):
        proc, ready = start()
        name = proc.name
        try:
            _wait_until(proc, ready, what, timeout)
        except _EarlyExit as e:
            last_error = str(e)
            if "address already in use" in last_error:
                continue
            raise ControlPlaneError(last_error) from None
        except BaseException:
            proc.stop()
            raise
        return proc
    raise ControlPlaneError(f"{name} could not get free ports: {last_error}")


class _EarlyExit(Exception):
    pass


def _wait_until(proc: Process, check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        code = proc.exited()
        if code is not None:
            raise _EarlyExit(
                f"{proc.name} exited with code {code} before {what} was ok; "
                f"log {proc.log_path} (GPU_BINDER_ENVTEST_KEEP=1 keeps it):\n{proc.tail()}"
            )
        if check():
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"{what} not ok after {timeout:.0f} s; "
                f"log {proc.log_path} (GPU_BINDER_ENVTEST_KEEP=1 keeps it):\n{proc.tail()}"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
