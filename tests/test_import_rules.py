"""The package map's import rules (docs/ARCHITECTURE.md), checked on what Python loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gpu_binder

SRC = Path(gpu_binder.__file__).resolve().parents[1]


def package_modules(package: str) -> list[str]:
    """Every module of a package of gpu_binder, by its dotted name."""
    folder = SRC.joinpath(*package.split("."))
    return [package] + [f"{package}.{p.stem}" for p in sorted(folder.glob("*.py"))]


def loaded_by(modules: list[str]) -> list[str]:
    """The gpu_binder modules a fresh interpreter holds after importing `modules` alone:
    what they import, directly or through another."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gpu_binder'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_the_cache_imports_neither_the_binder_nor_the_webhook() -> None:
    # Both read the cache; the cache reading either would make the world a part of them.
    cache = package_modules("gpu_binder.cache")
    assert "gpu_binder.cache.world" in cache
    modules = loaded_by(cache)
    forbidden = ("gpu_binder.binder", "gpu_binder.webhook")
    assert [m for m in modules if m.startswith(forbidden)] == []
