"""`gpu-binder agent`: node name, dry run, exit codes."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_sysfs import H100_GPUS, hgx_h100, l40s_x4

from gpu_binder.agent.command import dry_run, main_agent, node_name, parser, run
from gpu_binder.api.kinds import T
from gpu_binder.api.types import GPUDevice
from gpu_binder.cli.logs import JSONFormatter
from gpu_binder.client.errors import Forbidden
from gpu_binder.client.interface import ListResult
from gpu_binder.sim.memory import MemoryClient


def test_the_node_name_comes_from_the_flag_then_node_name_then_the_host_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert node_name("from-flag") == "from-flag"
    assert node_name(None) == "from-env"
    monkeypatch.delenv("NODE_NAME")
    monkeypatch.setattr("socket.gethostname", lambda: "GPU-Host-7")
    assert node_name(None) == "gpu-host-7"


def test_dry_run_prints_the_gpudevices_as_yaml(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    assert dry_run(tmp_path, "node-a", [], out, err) == 0
    docs = list(yaml.safe_load_all(out.getvalue()))
    devices = [GPUDevice.model_validate(d) for d in docs]
    assert [d.spec.pci_address for d in devices] == H100_GPUS
    assert [d.spec.slot for d in devices] == list(range(8))
    assert docs[0]["metadata"] == {
        "name": "node-a-0000-18-00-0",
        "labels": {"gpu.cozystack.io/node": "node-a"},
    }
    assert docs[0]["spec"]["nvlinkDomain"] == "nvswitch-0000-05-00-0"
    assert docs[0]["spec"]["vendorID"] == "0x10de"
    assert err.getvalue() == ""


def test_main_agent_once_dry_run_needs_no_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hgx_h100(tmp_path)
    code = main_agent(["--root", str(tmp_path), "--node", "n1", "--once", "--dry-run"])
    assert code == 0
    assert capsys.readouterr().out.count("kind: GPUDevice") == 8


def test_dry_run_on_a_root_without_sysfs_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_agent(["--root", str(tmp_path), "--node", "n1", "--once", "--dry-run"]) == 1
    assert "cannot list /sys/bus/pci/devices" in capsys.readouterr().err


def test_without_an_api_client_only_a_dry_run_is_possible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A build without gpu_binder.kube, the real client.
    monkeypatch.setattr("gpu_binder.agent.command._default_connect", lambda: None)
    assert main_agent(["--root", str(tmp_path), "--once"]) == 2
    assert "use --dry-run" in capsys.readouterr().err


def test_a_sync_through_the_given_client(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    client = MemoryClient()

    async def connect(kubeconfig: str | None) -> MemoryClient:
        return client

    argv = ["--root", str(tmp_path), "--node", "n1", "--once", "--no-device-plugin"]
    assert main_agent(argv, connect=connect) == 0
    assert len(client.objects(GPUDevice)) == 8


async def test_sighup_rescans_at_once_and_sigterm_stops_the_agent(tmp_path: Path) -> None:
    host = l40s_x4(tmp_path)
    client = MemoryClient()
    args = parser().parse_args(
        ["--root", str(tmp_path), "--node", "node-a", "--interval", "1h", "--no-device-plugin"]
    )
    task = asyncio.create_task(run(args, client))

    async def until(count: int) -> None:
        while len(client.objects(GPUDevice)) != count:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(until(4), 5)
    host.add_function("0000:e1:00.0", device="0x26b9", upstream=["0000:e0:01.0"])
    os.kill(os.getpid(), signal.SIGHUP)
    await asyncio.wait_for(until(5), 5)
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(task, 5) == 0


class ClosableClient(MemoryClient):
    closed = False

    async def close(self) -> None:
        self.closed = True


def test_the_client_is_closed_when_the_agent_ends(tmp_path: Path) -> None:
    hgx_h100(tmp_path)
    client = ClosableClient()

    async def connect(kubeconfig: str | None) -> MemoryClient:
        return client

    argv = ["--root", str(tmp_path), "--node", "n1", "--once", "--no-device-plugin"]
    assert main_agent(argv, connect=connect) == 0
    assert client.closed


def test_an_unusable_kubeconfig_is_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hgx_h100(tmp_path)
    missing = tmp_path / "missing.kubeconfig"
    argv = ["--root", str(tmp_path), "--once", "--kubeconfig", str(missing)]
    assert main_agent(argv) == 1
    assert capsys.readouterr().err == (
        f"gpu-binder agent: no API connection: kubeconfig {missing} does not exist\n"
    )


class RefusingClient(MemoryClient):
    async def list(self, kind: type[T], *args: Any, **kwargs: Any) -> ListResult[T]:
        raise Forbidden(f"{kind.__name__} is forbidden: no RBAC for the agent")


def test_a_refused_read_ends_a_once_pass_with_the_apis_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hgx_h100(tmp_path)

    async def connect(kubeconfig: str | None) -> MemoryClient:
        return RefusingClient()

    argv = ["--root", str(tmp_path), "--node", "n1", "--once", "--no-device-plugin"]
    assert main_agent(argv, connect=connect) == 1
    assert capsys.readouterr().err.endswith(
        "gpu-binder agent: GPUDevice is forbidden: no RBAC for the agent\n"
    )


# --- flags as `gpu-binder run` takes them ------------------------------------------------


def test_intervals_are_go_durations_as_for_run(tmp_path: Path) -> None:
    args = parser().parse_args(["--interval", "30s", "--resync", "1h30m"])
    assert args.interval == timedelta(seconds=30)
    assert args.resync == timedelta(hours=1, minutes=30)
    defaults = parser().parse_args([])
    assert (defaults.interval, defaults.resync) == (timedelta(seconds=10), timedelta(minutes=5))


def test_a_bare_number_is_refused_with_the_form_to_use(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["--interval", "30"])
    assert exit_.value.code == 2
    assert "use Go form such as 30s, 5m, 1h30m" in capsys.readouterr().err


def test_every_flag_can_come_from_a_gpu_binder_variable_and_a_flag_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPU_BINDER_INTERVAL", "1m")
    monkeypatch.setenv("GPU_BINDER_RESYNC", "10m")
    monkeypatch.setenv("GPU_BINDER_VENDOR", "0x10de, 0x1002")
    monkeypatch.setenv("GPU_BINDER_NO_DEVICE_PLUGIN", "true")
    monkeypatch.setenv("GPU_BINDER_ROOT", "/host")
    monkeypatch.setenv("GPU_BINDER_LOG_FORMAT", "text")
    args = parser().parse_args(["--resync", "2m"])
    assert args.interval == timedelta(minutes=1)
    assert args.resync == timedelta(minutes=2)
    assert args.vendor == ["0x10de", "0x1002"]
    assert args.no_device_plugin is True
    assert args.root == Path("/host")
    assert args.log_format == "text"


def test_a_bad_variable_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_BINDER_INTERVAL", "often")
    with pytest.raises(SystemExit):
        parser().parse_args([])
    assert "GPU_BINDER_INTERVAL: invalid duration 'often'" in capsys.readouterr().err


@pytest.mark.parametrize(("fmt", "json_lines"), [("json", True), ("text", False)])
def test_log_format_json_writes_one_object_per_line(
    tmp_path: Path, fmt: str, json_lines: bool
) -> None:
    hgx_h100(tmp_path)

    async def connect(kubeconfig: str | None) -> MemoryClient:
        return MemoryClient()

    argv = ["--root", str(tmp_path), "--node", "n1", "--once", "--no-device-plugin"]
    try:
        assert main_agent([*argv, f"--log-format={fmt}"], connect=connect) == 0
        (handler,) = logging.getLogger().handlers
        assert isinstance(handler.formatter, JSONFormatter) is json_lines
    finally:
        logging.getLogger().handlers.clear()
