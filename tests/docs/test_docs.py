"""The documentation a clone carries is complete and says what the code does: links stay
inside the repository, every Event reason and health message the code can write is
explained in TROUBLESHOOTING.md, every alert points at a section that exists, and every
metric the docs name is one the binder exports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SRC = REPO / "src" / "gpu_binder"
TROUBLESHOOTING = (DOCS / "TROUBLESHOOTING.md").read_text()
PAGES = [REPO / "README.md", REPO / "examples" / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_of_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://", target):
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(REPO), f"{page.name} links outside the clone: {target}"
        assert resolved.exists(), f"{page.name} links to a missing {target}"


def test_the_readme_points_at_the_architecture_in_the_repository() -> None:
    readme = (REPO / "README.md").read_text()
    assert "docs/ARCHITECTURE.md" in readme
    assert "shared/DESIGN" not in readme
    architecture = (DOCS / "ARCHITECTURE.md").read_text()
    # The sections code comments cite as "DESIGN §n" keep their numbers.
    for n, title in enumerate(
        ["Objects", "Invariants", "The binder", "The webhook", "The node agent"], start=1
    ):
        assert f"## {n}. {title}" in architecture


def event_reasons() -> set[str]:
    """Every Event reason the binder can write: literals, and GPU{BindReason}."""
    from gpu_binder.api.types import BindReason

    found = {f"GPU{r.value}" for r in BindReason}
    for path in (SRC / "binder").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                "vm_note",
                "device_note",
            ):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and re.fullmatch(
                        r"GPU[A-Z]\w+", str(arg.value)
                    ):
                        found.add(arg.value)
    return found


def test_every_event_reason_is_explained() -> None:
    reasons = event_reasons()
    assert {"GPUOrder", "GPUUnplaceable", "GPULost", "GPUMoveBlocked"} <= reasons
    from gpu_binder.binder.events import ACTIONS

    assert reasons <= set(ACTIONS), "each reason has its Event action"
    missing = [r for r in sorted(reasons) if f"| `{r}` |" not in TROUBLESHOOTING]
    assert not missing, f"TROUBLESHOOTING.md's Event table lacks {missing}"


# The fixed words of every healthMessage the agent writes (its variable parts left out),
# each checked to be in the agent's code, so this list cannot drift from it.
HEALTH_MESSAGES = [
    "bound to no driver; it must be bound to vfio-pci to reach a VM",
    "instead of vfio-pci",
    "has no IOMMU group: the IOMMU is off",
    "does not exist, so no VM can open its IOMMU group",
    "also holds",
    "SR-IOV is on with",
    "function-level reset failed",
    "its sysfs files cannot be read",
    "not bound to vfio-pci by the agent",
    "the vfio-pci driver is not loaded",
    "Read-only file system",
]


def test_every_health_message_is_explained() -> None:
    agent = "\n".join(p.read_text() for p in (SRC / "agent").glob("*.py"))
    for phrase in HEALTH_MESSAGES:
        if phrase != "Read-only file system":  # the kernel's words, which the agent adds to
            assert phrase in agent.replace('"\n            "', ""), phrase
        assert phrase in TROUBLESHOOTING, f"TROUBLESHOOTING.md does not explain {phrase!r}"


def test_every_alert_points_at_a_section_that_exists() -> None:
    rule = (
        REPO / "deploy" / "helm" / "gpu-binder" / "templates" / "prometheusrule.yaml"
    ).read_text()
    alerts = re.findall(r"- alert: (\w+)", rule)
    assert len(alerts) == 7
    headings = set(re.findall(r"^## (.+)$", TROUBLESHOOTING, re.MULTILINE))
    for section in re.findall(r'See "([^"]+)" in docs/TROUBLESHOOTING.md', rule):
        assert section in headings, section
    operations = (DOCS / "OPERATIONS.md").read_text()
    for alert in alerts:
        assert f"`{alert}`" in TROUBLESHOOTING or f"`{alert}`" in operations, alert


def test_every_metric_the_docs_name_is_exported() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics import MetricWrapperBase

    from gpu_binder.binder.metrics import Metrics
    from gpu_binder.kube.metrics import RunMetrics

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    for owner in (metrics, RunMetrics(registry)):
        for wrapper in vars(owner).values():
            if isinstance(wrapper, MetricWrapperBase) and wrapper._labelnames:
                wrapper.labels(*("x" for _ in wrapper._labelnames))
    metrics.tenants.held = {("t", "c", "bound"): 1}
    from gpu_binder.kube.collector import Pauses

    registry.register(Pauses())
    # The collectors read from a world: one with a quota and a closed record's seconds.
    from gpu_binder.api.quota import ResourceQuota
    from gpu_binder.api.types import GPUClass
    from gpu_binder.binder.ledgertotals import LedgerTotals
    from gpu_binder.cache import World
    from gpu_binder.client.interface import WatchEvent
    from gpu_binder.sim.builders import gpu_class

    world = World()
    world.apply(
        WatchEvent("ADDED", GPUClass.model_validate(gpu_class("c", "x.io/c", "0x0001").to_dict()))
    )
    quota = {
        "metadata": {"name": "q", "namespace": "t"},
        "spec": {"hard": {"requests.x.io/c": "1"}},
    }
    world.apply(WatchEvent("ADDED", ResourceQuota.from_dict(quota)))
    totals = LedgerTotals()
    totals.closed, totals.loaded = {("t", "c", "attached"): 1.0}, True
    metrics.quotas.world = world
    metrics.gpu_seconds.world, metrics.gpu_seconds.totals = world, totals
    series = set(re.findall(r"^(gpu_binder_\w+)", generate_latest(registry).decode(), re.M))
    # A histogram is named by its family, exported as _bucket, _count and _sum.
    exported = series | {re.sub(r"_(bucket|count|sum)$", "", s) for s in series}
    future: set[str] = set()
    renamed = {
        "gpu_binder_pass_seconds",
        "gpu_binder_webhook_seconds",
        "gpu_binder_largest_free_set",
    }
    for page in PAGES:
        named = set(re.findall(r"\b(gpu_binder_[a-z_]+[a-z])", page.read_text()))
        named -= future
        if page.name == "UPGRADING.md":
            named -= renamed  # the old names, in the table of renames
        assert named <= exported, f"{page.name} names {named - exported}"


def test_the_examples_the_docs_apply_exist() -> None:
    for page in PAGES:
        for name in re.findall(r"examples/([\w.-]+\.yaml)", page.read_text()):
            assert (REPO / "examples" / name).exists(), f"{page.name}: examples/{name}"
    notes = (REPO / "deploy" / "helm" / "gpu-binder" / "templates" / "NOTES.txt").read_text()
    for name in re.findall(r"examples/([\w.-]+\.yaml)", notes):
        assert (REPO / "examples" / name).exists(), f"NOTES.txt: examples/{name}"
    assert yaml.safe_load((REPO / "examples" / "gpuclass-h100-sxm.yaml").read_text())
