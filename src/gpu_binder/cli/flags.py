"""Flags every long-running command reads the same way: GPU_BINDER_<FLAG> variables,
Go durations (`30s`, `5m`, `1h30m`), booleans, and the log flags.

`gpu-binder run` and `gpu-binder agent` both build their parsers with :func:`env_adder`, so
a Deployment and a DaemonSet are configured alike (a ConfigMap through `envFrom`, or `env`),
and an operator who learnt one knows the other.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from gpu_binder.api.meta import parse_duration

ENV_PREFIX = "GPU_BINDER_"
LOG_FORMATS = ("json", "text")


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def duration(text: str) -> timedelta:
    """A Go duration, as the API's metav1.Duration fields and `gpu-binder run` take them."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list, blanks dropped: `a, b,` is ("a", "b")."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def env_name(flag: str) -> str:
    """--lost-grace is GPU_BINDER_LOST_GRACE."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def env_adder(p: argparse.ArgumentParser) -> Callable[..., None]:
    """add_argument with the default taken from GPU_BINDER_<FLAG> when it is set.

    A flag on the command line still wins. A switch (`action="store_true"`) reads the
    variable as a boolean; a repeatable flag (`action="append"`) as a comma-separated list.
    """

    def add(flag: str, **kwargs: Any) -> None:
        env = env_name(flag)
        if env in os.environ:
            raw = os.environ[env]
            action = kwargs.get("action")
            try:
                if action == "store_true":
                    kwargs["default"] = boolean(raw)
                elif action == "append":
                    convert = kwargs.get("type", str)
                    kwargs["default"] = [convert(v) for v in names(raw)]
                else:
                    kwargs["default"] = kwargs.get("type", str)(raw)
            except (argparse.ArgumentTypeError, ValueError) as e:
                p.error(f"{env}: {e}")
        kwargs["help"] = f"{kwargs.get('help', '')} [env {env}]".strip()
        p.add_argument(flag, **kwargs)

    return add


def add_log_flags(add: Callable[..., None], level: str = "info") -> None:
    """--log-level and --log-format, the same on every command (kube.logs.setup reads them)."""
    add("--log-level", default=level, help="debug, info, warning or error")
    add(
        "--log-format",
        default="json",
        choices=LOG_FORMATS,
        help="json: one object per line, for log collectors; text: for people",
    )
