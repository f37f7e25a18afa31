"""What pyproject.toml promises: an install without warnings, and each dependency where
the code that needs it is (README, "Dependencies and why each is there")."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "gpu_binder"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def importers_of(top: str) -> set[str]:
    """The modules of gpu_binder that import package `top` (at any depth of the file)."""
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n == top or n.startswith(f"{top}.") for n in names):
                found.add(".".join(path.relative_to(SRC.parent).with_suffix("").parts))
    return found


def test_setuptools_reads_the_project_without_a_warning() -> None:
    # What `pip install -e .` prints from the build backend: a deprecated form warns on
    # every install (the license table did, until setuptools 77's SPDX string).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_configuration(Distribution(), REPO / "pyproject.toml")


def test_cryptography_is_only_in_the_extra_of_the_code_that_imports_it() -> None:
    assert importers_of("cryptography") == {"gpu_binder.envtest.certs"}
    assert not any(d.startswith("cryptography") for d in PROJECT["dependencies"])
    extras = PROJECT["optional-dependencies"]
    assert any(d.startswith("cryptography") for d in extras["controlplane"])
    assert "gpu-binder[controlplane]" in extras["dev"]


def test_the_commands_of_the_image_run_without_cryptography() -> None:
    # As in the image (no extras): run, agent, usage and kubectl gpu import and answer
    # --help; only the local control plane would need it, and says how to get it.
    code = """
import sys
sys.modules["cryptography"] = None  # an import of it fails
from gpu_binder.cli.main import main
for command in ("run", "agent", "usage", "status", "check"):
    try:
        main([command, "--help"])
    except SystemExit as e:
        assert e.code == 0, (command, e.code)
try:
    import gpu_binder.envtest
except ImportError as e:
    assert "gpu-binder[controlplane]" in str(e), e
else:
    raise AssertionError("envtest imported without cryptography")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
