"""The binder's metrics and the chart's alerts, checked by Prometheus's own promtool.

`promtool check metrics` lints the exposition of /metrics; the chart's PrometheusRule,
rendered by helm, passes `promtool check rules`, and every alert is run by `promtool test
rules` on series that must fire it and series that must not. promtool is found or built
once per machine by gpu_binder.envtest.promtool (`go install` from the Go module proxy);
helm as for test_helm_chart.py. Without them the tests are skipped with one line saying
how to enable them, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import test_helm_chart
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from gpu_binder.binder.metrics import Metrics
from gpu_binder.envtest import AssetsBuildError, AssetsUnavailable
from gpu_binder.envtest.promtool import PROMTOOL
from gpu_binder.kube.metrics import RunMetrics

# The first test may build promtool (ten minutes or more on 2 cores) inside its timeout.
pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(3600)]

helm = test_helm_chart.helm
JOB = "gpu-binder-webhook"  # the Service's name: the ServiceMonitor's job


@pytest.fixture(scope="session")
def promtool(pytestconfig: pytest.Config) -> Path:
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def progress(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    try:
        return PROMTOOL.ensure(progress=progress)
    except AssetsUnavailable as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"promtool tests cannot run (CI=true): {e}", pytrace=False)
        pytest.skip(f"promtool tests skipped: {e}")
    except AssetsBuildError as e:
        pytest.fail(f"building promtool failed: {e}", pytrace=False)


def run(promtool: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- /metrics -----------------------------------------------------------------------------


def exposition() -> str:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    run_metrics = RunMetrics(registry)
    for owner in (metrics, run_metrics):
        for wrapper in vars(owner).values():
            if isinstance(wrapper, MetricWrapperBase) and wrapper._labelnames:
                wrapper.labels(*("x" for _ in wrapper._labelnames))
    metrics.tenants.held = {("tenant", "h100", "attached"): 1}
    return generate_latest(registry).decode()


def test_promtool_finds_nothing_to_lint_in_the_binders_metrics(promtool: Path) -> None:
    done = run(promtool, "check", "metrics", stdin=exposition())
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_promtool_lint_does_find_a_badly_named_metric(promtool: Path) -> None:
    """The lint above can fail: a counter without _total, in milliseconds, is named."""
    bad = "# HELP gpu_binder_passes_ms Passes\n# TYPE gpu_binder_passes_ms counter\n"
    done = run(promtool, "check", "metrics", stdin=bad + "gpu_binder_passes_ms 1\n")
    assert done.returncode != 0
    assert "gpu_binder_passes_ms" in done.stdout + done.stderr


# --- the alerts -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rules(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's PrometheusRule as a Prometheus rule file."""
    docs = test_helm_chart.render(
        helm,
        values={"prometheusRule": {"enabled": True}},
        tmp=tmp_path_factory.mktemp("values"),
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


def test_the_rules_pass_promtools_check_and_lint(promtool: Path, rules: Path) -> None:
    done = run(promtool, "check", "rules", "--lint=all", "--lint-fatal", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr
    names = {r["alert"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    assert names == {case[0] for case in CASES}, "every alert has its cases below"


def series(name: str, values: str, instance: str = "a", **labels: str) -> dict[str, str]:
    pairs = {"job": JOB, "instance": instance, **labels}
    text = ",".join(f'{k}="{v}"' for k, v in pairs.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def leading(instance: str = "a", standby: str = "b") -> list[dict[str, str]]:
    """Two replicas, `instance` holding the Lease for the whole test."""
    return [
        series("gpu_binder_leader", "1x30", instance),
        series("gpu_binder_leader", "0x30", standby),
    ]


def webhook(bucket_counts: dict[str, str]) -> list[dict[str, str]]:
    return [
        series("gpu_binder_webhook_duration_seconds_bucket", v, le=le, allowed="true")
        for le, v in bucket_counts.items()
    ]


NO_LEADER = "No gpu-binder replica has held the leader Lease for a minute"

# (alert, case, input series, evaluation time, alerts expected then: labels besides the
# alert's name and severity, and a summary when it matters). Series are 1 minute apart.
Case = tuple[str, str, list[dict[str, str]], str, list[dict[str, Any]]]
CASES: list[Case] = [
    (
        "GPUBinderNoLeader",
        "fires when neither replica leads for a minute",
        [series("gpu_binder_leader", "0x10", "a"), series("gpu_binder_leader", "0x10", "b")],
        "2m",
        [{"labels": {"severity": "critical"}, "summary": NO_LEADER}],
    ),
    (
        "GPUBinderNoLeader",
        "fires when no replica is scraped at all",
        [series("up", "0x10")],
        "2m",
        [{"labels": {"severity": "critical"}, "summary": NO_LEADER}],
    ),
    ("GPUBinderNoLeader", "quiet while one replica leads", leading(), "5m", []),
    (
        "GPUBinderNoLeader",
        "quiet through a failover shorter than a minute",
        [series("gpu_binder_leader", "1 1 0 1 1 1", "a"), series("gpu_binder_leader", "0x5", "b")],
        "3m",
        [],
    ),
    (
        "GPUBinderGPUsLost",
        "fires on the leader's Lost GPUs",
        [*leading(), series("gpu_binder_devices", "2x10", class_name="h100", phase="Lost")],
        "3m",
        [
            {
                "labels": {"severity": "warning", "class_name": "h100"},
                "summary": "2 GPU(s) of class h100 are Lost",
            }
        ],
    ),
    (
        "GPUBinderGPUsLost",
        "quiet on a standby's stale gauge",
        [*leading(), series("gpu_binder_devices", "2x10", "b", class_name="h100", phase="Lost")],
        "3m",
        [],
    ),
    (
        "GPUBinderGPUsLost",
        "quiet with no GPU Lost",
        [*leading(), series("gpu_binder_devices", "0x10", class_name="h100", phase="Lost")],
        "3m",
        [],
    ),
    (
        "GPUBinderOrdersUnplaceable",
        "fires after 10 minutes of an order fitting nowhere",
        [*leading(), series("gpu_binder_unplaceable_orders", "1x20")],
        "11m",
        [
            {
                "labels": {"severity": "warning"},
                "summary": "1 GPU order(s) have fit on no node for 10 minutes",
            }
        ],
    ),
    (
        "GPUBinderOrdersUnplaceable",
        "quiet before 10 minutes",
        [*leading(), series("gpu_binder_unplaceable_orders", "1x20")],
        "9m",
        [],
    ),
    (
        "GPUBinderWebhookSlow",
        "fires when the 99th percentile is over 1 s for 5 minutes",
        # Every admission takes between 1 and 2.5 s.
        [
            *leading(),
            *webhook({"0.5": "0x20", "1": "0x20", "2.5": "0+60x20", "+Inf": "0+60x20"}),
        ],
        "12m",
        [
            {
                "labels": {"severity": "warning"},
                "summary": "The GPU admission webhook answers in over 1 s at the 99th percentile",
            }
        ],
    ),
    (
        "GPUBinderWebhookSlow",
        "quiet when admissions take milliseconds",
        [
            *leading(),
            *webhook({"0.005": "0+60x20", "1": "0+60x20", "2.5": "0+60x20", "+Inf": "0+60x20"}),
        ],
        "12m",
        [],
    ),
    (
        "GPUBinderNodeDegraded",
        "fires on a degraded node",
        [*leading(), series("gpu_binder_degraded_nodes", "1x10")],
        "2m",
        [
            {
                "labels": {"severity": "warning"},
                "summary": "1 node(s) serve fewer GPUs than they hold",
            }
        ],
    ),
    (
        "GPUBinderNodeDegraded",
        "quiet with every node served",
        [*leading(), series("gpu_binder_degraded_nodes", "0x10")],
        "5m",
        [],
    ),
    (
        "GPUBinderCleaningStuck",
        "fires once a GPU released at minute 0 waits past 10 minutes",
        [
            *leading(),
            series("gpu_binder_oldest_cleaning_timestamp_seconds", "0x20", class_name="l40s"),
        ],
        "11m",
        [
            {
                "labels": {"severity": "warning", "class_name": "l40s"},
                "summary": "A GPU of class l40s has waited over 10 minutes for its reset",
            }
        ],
    ),
    (
        "GPUBinderCleaningStuck",
        "quiet through a busy class's turnover: each oldest release is a minute old",
        [
            *leading(),
            series("gpu_binder_oldest_cleaning_timestamp_seconds", "0+60x20", class_name="l40s"),
        ],
        "15m",
        [],
    ),
    (
        "GPUBinderQuotaExceeded",
        "fires when a namespace holds more than its quota allows",
        [
            *leading(),
            series(
                "gpu_binder_quota_gpus", "5x10", namespace="acme", class_name="h100", kind="used"
            ),
            series(
                "gpu_binder_quota_gpus", "4x10", namespace="acme", class_name="h100", kind="hard"
            ),
        ],
        "6m",
        [
            {
                "labels": {"severity": "info", "namespace": "acme", "class_name": "h100"},
                "summary": "Namespace acme holds more h100 GPUs than its quota allows",
            }
        ],
    ),
    (
        "GPUBinderQuotaExceeded",
        "quiet within the quota",
        [
            *leading(),
            series(
                "gpu_binder_quota_gpus", "4x10", namespace="acme", class_name="h100", kind="used"
            ),
            series(
                "gpu_binder_quota_gpus", "4x10", namespace="acme", class_name="h100", kind="hard"
            ),
        ],
        "6m",
        [],
    ),
    (
        "GPUBinderQuotaExceeded",
        "quiet where no quota limits the class",
        [
            *leading(),
            series(
                "gpu_binder_tenant_gpus",
                "9x10",
                namespace="acme",
                class_name="h100",
                state="attached",
            ),
        ],
        "6m",
        [],
    ),
]


@pytest.mark.parametrize(
    ("alert", "case", "inputs", "at", "expected"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES]
)
def test_the_alert_fires_exactly_when_it_should(
    promtool: Path,
    rules: Path,
    tmp_path: Path,
    alert: str,
    case: str,
    inputs: list[dict[str, str]],
    at: str,
    expected: list[dict[str, Any]],
) -> None:
    # promtool compares every annotation: the summary as it must read, the description as
    # the rule has it.
    alerts = [
        {
            "exp_labels": e["labels"],
            "exp_annotations": {"summary": e["summary"], **description_of(rules, alert)},
        }
        for e in expected
    ]
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": alerts}],
            }
        ],
    }
    file = tmp_path / "tests.yaml"
    file.write_text(yaml.safe_dump(tests))
    done = run(promtool, "test", "rules", str(file))
    assert done.returncode == 0, f"{alert}: {case}\n{done.stdout}{done.stderr}"


def description_of(rules: Path, alert: str) -> dict[str, str]:
    for group in yaml.safe_load(rules.read_text())["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                return {"description": rule["annotations"]["description"]}
    raise KeyError(alert)
