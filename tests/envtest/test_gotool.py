"""Go tools the tests need (helm, promtool): found in the environment or the cache, else
built once with `go install` into the cache. Here `go` is a stand-in script that records
what it was asked and writes what the real one would, so the build's steps are checked
without the minutes a real build takes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gpu_binder.envtest import AssetsUnavailable
from gpu_binder.envtest.gotool import GoTool
from gpu_binder.envtest.helm import HELM
from gpu_binder.envtest.promtool import PROMTOOL

FAKE_GO = """#!/bin/sh
echo "$@" >> "$GO_CALLS"
if [ "$1" = mod ]; then
  printf 'module x\\nrequire (\\n\\tk8s.io/client-go v0.35.1\\n)\\n' > "$GO_TMP/go.mod"
  printf '{"GoMod": "%s/go.mod"}' "$GO_TMP"
elif [ "$1" = install ]; then
  for last; do :; done
  name=$(basename "${last%@*}")
  printf '#!/bin/sh\\necho built\\n' > "$GOBIN/$name"
  chmod +x "$GOBIN/$name"
fi
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    go = bindir / "go"
    go.write_text(FAKE_GO)
    go.chmod(go.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GO_CALLS", str(calls))
    monkeypatch.setenv("GO_TMP", str(tmp_path))
    monkeypatch.setenv("GPU_BINDER_CACHE", str(tmp_path / "cache"))
    for tool in (HELM, PROMTOOL):
        monkeypatch.delenv(tool.env, raising=False)
    return calls


def test_a_missing_tool_is_built_once_into_the_cache(fake_go: Path, tmp_path: Path) -> None:
    built = PROMTOOL.ensure(progress=lambda line: None)
    assert built == tmp_path / "cache" / "promtool" / PROMTOOL.default_version / "promtool"
    assert os.access(built, os.X_OK)
    assert PROMTOOL.ensure() == built
    installs = [c for c in fake_go.read_text().splitlines() if c.startswith("install")]
    assert len(installs) == 1, "the second ensure finds the cached binary"
    assert installs[0].endswith(f"{PROMTOOL.package}@{PROMTOOL.default_version}")


def test_helm_is_stamped_with_its_version_and_kubernetes_minor(fake_go: Path) -> None:
    HELM.ensure(progress=lambda line: None)
    (install,) = [c for c in fake_go.read_text().splitlines() if c.startswith("install")]
    assert f"internal/version.version={HELM.default_version}" in install
    assert "pkg/chartutil.k8sVersionMinor=35" in install


def test_the_variable_names_a_binary_to_use_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "promtool"
    mine.write_text("#!/bin/sh\n")
    mine.chmod(0o755)
    monkeypatch.setenv("GPU_BINDER_PROMTOOL", str(mine))
    assert PROMTOOL.ensure(build=False) == mine
    monkeypatch.setenv("GPU_BINDER_PROMTOOL", str(tmp_path / "missing"))
    with pytest.raises(AssetsUnavailable, match=r"GPU_BINDER_PROMTOOL=.* is not an executable"):
        PROMTOOL.ensure()


def test_without_go_it_says_in_one_line_how_to_enable_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GPU_BINDER_CACHE", str(tmp_path / "cache"))
    tool = GoTool("sometool", "example.com/m", "example.com/m/cmd/sometool", "v1.0.0")
    with pytest.raises(AssetsUnavailable) as e:
        tool.ensure()
    assert str(e.value) == (
        "no sometool and no Go on PATH; to enable, set GPU_BINDER_SOMETOOL to a sometool "
        "binary, or install Go (`go install example.com/m/cmd/sometool` then builds it once)"
    )
    assert json.dumps(str(e.value)).count("\\n") == 0
