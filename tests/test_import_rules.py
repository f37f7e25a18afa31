"""The package map's import rules (docs/ARCHITECTURE.md), checked on what Python loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# The layers of docs/ARCHITECTURE.md's package map: each package and the packages of
# gpu_binder it may load. The decision core (cache, binder) stays pure only while nothing
# below the edges (kube, sim, cli, ...) is imported by it; the edges may use anything.
LAYERS: dict[str, tuple[str, ...]] = {
    "api": (),
    "client": ("api",),
    "placement": ("api",),
    "cache": ("api", "client", "placement"),
    "binder": ("api", "cache", "client", "placement"),
    "webhook": ("api", "binder", "cache", "client", "placement"),
}


def all_modules(package: str) -> list[str]:
    """Every module of a package of gpu_binder and of its subpackages."""
    folder = SRC.joinpath(*package.split("."))
    return [package] + [
        ".".join((package, *p.relative_to(folder).with_suffix("").parts))
        for p in sorted(folder.rglob("*.py"))
        if p.name != "__init__.py"
    ]


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_loads_only_the_layers_below_it(layer: str) -> None:
    allowed = {f"gpu_binder.{p}" for p in (layer, *LAYERS[layer])}
    loaded = loaded_by(all_modules(f"gpu_binder.{layer}"))
    outside = [m for m in loaded if m != "gpu_binder" and ".".join(m.split(".")[:2]) not in allowed]
    assert outside == [], f"{layer} may load only {sorted(allowed)}"
