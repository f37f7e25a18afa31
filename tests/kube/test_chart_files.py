"""The deployment's files that need no helm: the chart's CRDs, its dashboard, the image.

tests/controlplane/test_helm_chart.py renders the chart with a real helm and applies it to
a real API server; these checks run in the fast tier.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from gpu_binder.binder.metrics import Metrics
from gpu_binder.kube.metrics import RunMetrics

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpu-binder"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_charts_crds_are_a_copy_of_deploy_crds() -> None:
    """`make crds` writes deploy/crds/ and copies it into the chart: one source, two places."""
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").iterdir()}
    deploy = {p.name: p.read_bytes() for p in (REPO / "deploy" / "crds").glob("*.yaml")}
    assert chart.keys() == deploy.keys()
    stale = [name for name in deploy if chart[name] != deploy[name]]
    assert not stale, f"run `make crds`: the chart's copies of {stale} differ"


# --- the dashboard ------------------------------------------------------------------------


def exported() -> dict[str, set[str]]:
    """Every series name the binder's /metrics can show, with the labels it carries."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    run = RunMetrics(registry)
    for owner in (metrics, run):
        for wrapper in vars(owner).values():
            if isinstance(wrapper, MetricWrapperBase) and wrapper._labelnames:
                wrapper.labels(*("x" for _ in wrapper._labelnames))
    metrics.tenants.held = {("tenant", "h100", "attached"): 1}  # read from the world when scraped
    series: dict[str, set[str]] = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("#"):
            continue
        found = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?", line)
        assert found is not None, line
        names = set(re.findall(r'([a-zA-Z_]+)="', found[2] or ""))
        series.setdefault(found[1], set()).update(names)
    return series


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "files" / "dashboard.json").read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def test_the_dashboard_asks_only_for_series_the_binder_exports() -> None:
    series = exported()
    used = {name for expr in expressions() for name in re.findall(r"\bgpu_binder_\w+", expr)}
    assert used, "the dashboard queries no gpu_binder series"
    assert used <= series.keys(), used - series.keys()
    # Every metric family is on the dashboard (its _total, _bucket, ... or itself).
    families = {re.sub(r"_(total|created|bucket|count|sum)$", "", s) for s in series}
    shown = {re.sub(r"_(total|bucket|count|sum)$", "", s) for s in used}
    assert families <= shown, families - shown


def test_the_dashboard_groups_only_by_labels_its_series_carry() -> None:
    series = exported()
    # Labels Prometheus adds to every scraped series, and histograms' bucket bound.
    scrape = {"le", "instance", "job"}
    for expr in expressions():
        names = re.findall(r"\bgpu_binder_\w+", expr)
        carried = set().union(*(series[n] for n in names)) | scrape
        for group in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            labels = {g.strip() for g in group.split(",") if g.strip()}
            assert labels <= carried, (expr, labels - carried)


def test_the_dashboard_is_well_formed_for_grafana() -> None:
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert variables == {"datasource", "job"}
    for p in panels():
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"] and all(t["refId"] for t in p["targets"]), p["title"]
        assert all('job=~"$job"' in t["expr"] for t in p["targets"]), p["title"]
    # Panels do not overlap on the 24-column grid.
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, p["title"]
        cells |= mine


# --- the image --------------------------------------------------------------------------


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages as (instruction, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text())
    out: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            out.append([])
        out[-1].append((instruction.upper(), args.strip()))
    return out


def test_the_image_runs_gpu_binder_as_a_numeric_non_root_user() -> None:
    *_, final = stages()
    assert final[0] == ("FROM", "python:3.11-slim")
    (user,) = [args for op, args in final if op == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "runAsNonRoot needs a numeric non-root user"
    (entrypoint,) = [args for op, args in final if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["gpu-binder"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "gpu-binder" in scripts


def test_the_build_copies_only_what_dockerignore_lets_through() -> None:
    ignore = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = [
        args.split()[0]
        for stage in stages()
        for op, args in stage
        if op == "COPY" and not args.startswith("--from")
    ]
    assert copied and set(copied) <= allowed
    assert all((REPO / path).exists() for path in copied)


@pytest.mark.parametrize(
    "manifest", ["deploy/binder/deployment.yaml", "deploy/agent/daemonset.yaml"]
)
def test_the_manifests_and_the_chart_run_the_image_of_this_version(manifest: str) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["appVersion"] == VERSION
    assert (values["image"]["repository"], values["image"]["tag"]) == ("gpu-binder", "")
    images = {
        c["image"]
        for doc in yaml.safe_load_all((REPO / manifest).read_text())
        if doc and doc["kind"] in ("Deployment", "DaemonSet")
        for c in doc["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"gpu-binder:{VERSION}"}


# --- values.schema.json -------------------------------------------------------------------


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def camel(flag: str) -> str:
    first, *rest = flag.lstrip("-").split("-")
    return first + "".join(p.capitalize() for p in rest)


def test_binder_config_in_the_schema_is_every_flag_of_run_and_no_other() -> None:
    """binder.config's keys become GPU_BINDER_<FLAG>: a key run does not read would be
    dropped silently, so the schema lists exactly run's flags, typed as run parses them."""
    from gpu_binder.cli.flags import boolean, duration
    from gpu_binder.kube.command import parser

    config = schema()["properties"]["binder"]["properties"]["config"]
    assert config["additionalProperties"] is False
    flags = {
        camel(a.option_strings[0]): a
        for a in parser()._actions
        if a.option_strings and a.dest != "help"
    }
    assert config["properties"].keys() == flags.keys()
    for key, action in flags.items():
        prop = config["properties"][key]
        if action.type is duration:
            assert "string" in prop["type"] and re.search(prop["pattern"], "1h30m"), key
        elif action.type is boolean:
            assert "boolean" in prop["type"], key
        elif action.type is int:
            assert "integer" in prop["type"], key
        elif action.choices:
            assert set(prop["enum"]) == {*action.choices, None}, key


def value_paths(values: Any, prefix: str = "") -> set[str]:
    """Every key path of values.yaml down to a leaf or to an empty map."""
    if not isinstance(values, dict) or not values:
        return {prefix}
    return {p for k, v in values.items() for p in value_paths(v, f"{prefix}.{k}".lstrip("."))}


def declared(node: dict[str, Any], path: str) -> bool:
    for step in path.split("."):
        props = node.get("properties", {})
        if step not in props:
            # Only a free-form map (labels, nodeSelector, resources) takes any key.
            return node.get("additionalProperties", True) is not False
        node = props[step]
    return True


def test_every_value_of_values_yaml_is_declared_in_the_schema() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = sorted(p for p in value_paths(values) if not declared(schema(), p))
    assert not missing, f"values.schema.json does not declare {missing}"
    assert schema()["additionalProperties"] is False, "a misspelt top-level value must fail"
