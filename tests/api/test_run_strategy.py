"""set_to_start: whether KubeVirt keeps a VM running, per runStrategy and its VMI
(virt-controller's isSetToStart and syncRunStrategy, pkg/virt-controller/watch/vm/vm.go)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance, set_to_start


def vm(spec: dict[str, Any], status: dict[str, Any] | None = None) -> VirtualMachine:
    raw = {"metadata": {"name": "vm", "namespace": "t", "uid": "vm-uid"}, "spec": spec}
    if status is not None:
        raw["status"] = status
    return VirtualMachine.from_dict(raw)


def vmi(phase: str) -> VirtualMachineInstance:
    return VirtualMachineInstance.from_dict(
        {"metadata": {"name": "vm", "namespace": "t", "uid": "vmi-uid"}, "status": {"phase": phase}}
    )


START = {"stateChangeRequests": [{"action": "Start"}]}
SYNCED = {"runStrategy": "RerunOnFailure"}

CASES = [
    pytest.param({"runStrategy": "Always"}, None, None, True, id="always-without-vmi"),
    pytest.param({"runStrategy": "Always"}, None, "Succeeded", True, id="always-replaces-ended"),
    pytest.param({"runStrategy": "Halted"}, None, "Running", False, id="halted-stops-its-vmi"),
    pytest.param({"runStrategy": "Once"}, None, None, True, id="once-not-yet-started"),
    pytest.param({"runStrategy": "Once"}, None, "Running", False, id="once-runs-no-second"),
    pytest.param({"runStrategy": "Once"}, None, "Failed", False, id="once-ended"),
    pytest.param({"runStrategy": "RerunOnFailure"}, None, "Failed", True, id="rerun-failed"),
    pytest.param({"runStrategy": "RerunOnFailure"}, None, "Succeeded", False, id="rerun-succeeded"),
    pytest.param({"runStrategy": "RerunOnFailure"}, SYNCED, None, False, id="rerun-gone"),
    pytest.param(
        {"runStrategy": "RerunOnFailure"}, {**SYNCED, **START}, None, True, id="rerun-start"
    ),
    pytest.param({"runStrategy": "RerunOnFailure"}, {}, None, True, id="rerun-never-synced"),
    pytest.param({"runStrategy": "Manual"}, None, None, False, id="manual-without-request"),
    pytest.param({"runStrategy": "Manual"}, START, None, True, id="manual-start-request"),
    pytest.param({"runStrategy": "Manual"}, None, "Running", True, id="manual-running"),
    pytest.param({"runStrategy": "Manual"}, None, "Succeeded", False, id="manual-ended"),
    pytest.param(
        {"runStrategy": "Manual"},
        {"stateChangeRequests": [{"action": "Stop", "uid": "vmi-uid"}]},
        "Running",
        False,
        id="manual-stop-request",
    ),
    pytest.param({"runStrategy": "WaitAsReceiver"}, None, None, True, id="receiver"),
    pytest.param({"running": True}, None, None, True, id="running-true-is-always"),
    pytest.param({"running": False}, None, None, False, id="running-false-is-halted"),
    pytest.param({}, None, None, False, id="neither-is-halted"),
    pytest.param({"running": True, "runStrategy": "Always"}, None, None, False, id="both-errs"),
]


@pytest.mark.parametrize(("spec", "status", "phase", "runs"), CASES)
def test_kubevirt_keeps_the_vm_running_as_its_run_strategy_says(
    spec: dict[str, Any], status: dict[str, Any] | None, phase: str | None, runs: bool
) -> None:
    assert set_to_start(vm(spec, status), vmi(phase) if phase else None) is runs
