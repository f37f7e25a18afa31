"""`gpu-binder run`'s configuration: flags, GPU_BINDER_* variables, and JSON log lines."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from gpu_binder.cli.logs import JSONFormatter
from gpu_binder.kube.command import main_run, parser, settings


def test_flags_set_the_binders_config_and_the_lease_timings() -> None:
    args = parser().parse_args(
        [
            "--lost-grace=90s",
            "--excluded-namespaces=a, b",
            "--enabled=false",
            "--defrag=false",
            "--retry-period=500ms",
            "--metrics-port=0",
        ]
    )
    config, options = settings(args)
    assert config.lost_grace == timedelta(seconds=90)
    assert config.excluded_namespaces == ("a", "b")
    assert not config.enabled and not config.defrag
    assert options.timings.retry_period == 0.5 and options.timings.lease_duration == 15
    assert options.metrics_port is None


def test_the_environment_sets_defaults_and_a_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_BINDER_LOST_GRACE", "2m")
    monkeypatch.setenv("GPU_BINDER_BIND_TIMEOUT", "3s")
    config, _ = settings(parser().parse_args(["--bind-timeout=4s"]))
    assert config.lost_grace == timedelta(minutes=2)
    assert config.bind_timeout == timedelta(seconds=4)


def test_lease_timings_that_cannot_fence_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_run(["--lease-duration=5s", "--renew-deadline=10s"]) == 2
    assert "leaseDuration > renewDeadline" in capsys.readouterr().err


def test_a_log_line_is_one_json_object_with_the_extra_fields() -> None:
    record = logging.LogRecord("gpu_binder.kube", logging.INFO, "", 0, "pass %s", ("done",), None)
    record.key = "gpu-binder"
    line = json.loads(JSONFormatter().format(record))
    assert line["msg"] == "pass done" and line["level"] == "info"
    assert line["key"] == "gpu-binder" and line["ts"].endswith("+00:00")


def test_a_missing_kubeconfig_is_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main_run([f"--kubeconfig={missing}", "--log-format=text"]) == 2
    assert f"kubeconfig {missing} does not exist" in capsys.readouterr().err
