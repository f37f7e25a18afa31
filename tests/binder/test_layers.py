"""The binder's import rules (issue 16): what may import what, read from the source.

A step that imports another step couples their decisions through the back door, and a
package that reaches past binder/__init__.py into the steps or the pass Context couples
itself to how a pass is made; both read here as imports, so the rules are checked there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_binder
from gpu_binder import binder

SRC = Path(gpu_binder.__file__).parent
STEPS = "gpu_binder.binder.steps"


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module the file imports, at any depth of it (a function's, TYPE_CHECKING's):
    `from a import b` counts as a.b, as b may be a module of a."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _files(under: Path) -> list[Path]:
    return sorted(under.rglob("*.py"))


def test_no_step_imports_another_step() -> None:
    steps = {_module(p) for p in _files(SRC / "binder" / "steps")}
    found = set()
    for path in _files(SRC / "binder" / "steps"):
        me = _module(path)
        found.update(f"{me} imports {n}" for n in _imports(path) & steps if n != me)
    assert sorted(found) == []


def test_packages_outside_the_binder_use_only_its_face() -> None:
    found = set()
    for path in _files(SRC):
        me = _module(path)
        if me.startswith("gpu_binder.binder"):
            continue
        for name in _imports(path):
            # gpu_binder.binder.X, from `import gpu_binder.binder.X` or `from gpu_binder.binder
            # import X`: X must be a name the face exports, not a module of binder/.
            parts = name.split(".")
            inner = parts[:2] == ["gpu_binder", "binder"] and len(parts) > 2
            if inner and parts[2] not in binder.__all__:
                found.add(f"{me} imports gpu_binder.binder.{parts[2]}")
    assert sorted(found) == []
