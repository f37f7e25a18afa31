"""A VM's runStrategy and what `virtctl start` / `virtctl stop` do to it.

`run_strategy` is `VirtualMachine.RunStrategy()` (kubevirt/kubevirt
`staging/src/kubevirt.io/api/core/v1/types.go`): the deprecated `spec.running` maps to
Always (true) or Halted (false); with neither, Halted; both set is an error.

`virtctl` is virt-api's start and stop subresources (`pkg/virt-api/rest/lifecycle.go`,
`StartVMRequestHandler`, `StopVMRequestHandler`):
- start: Halted becomes Always (or `running: true`); RerunOnFailure and Manual get a Start
  request (a Stop request for the final VMI first, when there is one: Manual's final
  VMI, RerunOnFailure's Succeeded one); a running VM, a Failed RerunOnFailure VM, and
  Always and Once VMs refuse it.
- stop: Always and Once become Halted (or `running: false`); RerunOnFailure and Manual
  get a Stop request for their VMI, and refuse when none runs; Halted refuses.
"""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire

STRATEGIES = ("Always", "RerunOnFailure", "Once", "Manual", "Halted", "WaitAsReceiver")
# The strategies under which the VM controller starts VMIs by itself, and backs off after
# one failed before it ran (vm.go, shouldClearStartFailure).
AUTO_RESTART = frozenset({"Always", "RerunOnFailure", "Once"})
START, STOP = "Start", "Stop"
ENDED = ("Succeeded", "Failed")


class StrategyError(Exception):
    """A VM whose runStrategy cannot be read: its sync fails."""


def run_strategy(vm_raw: dict[str, Any]) -> str:
    spec = vm_raw.get("spec") or {}
    running, strategy = spec.get("running"), spec.get("runStrategy")
    if running is not None and strategy is not None:
        raise StrategyError("running and runstrategy are mutually exclusive")
    if running is not None:
        return "Always" if running else "Halted"
    return str(strategy) if strategy is not None else "Halted"


async def virtctl(client: MemoryClient, namespace: str, name: str, start: bool) -> str | None:
    """`virtctl start` (or stop) of a VM; the refusal (a 409 Conflict's reason), or None."""
    vm = client.peek(VirtualMachine, name, namespace)
    if vm is None:
        return f'virtualmachine "{name}" not found'
    try:
        strategy = run_strategy(vm.raw)
    except StrategyError as e:
        return str(e)
    vmi = client.peek(VirtualMachineInstance, name, namespace)
    final = vmi is not None and vmi.phase in ENDED
    requests: list[dict[str, Any]] = []
    running_spec: bool | None = None
    if start:
        if vmi is not None and not final and vmi.phase not in ("", "Unknown"):
            return "VM is already running"
        if strategy == "Halted":
            running_spec = True
        elif strategy in ("RerunOnFailure", "Manual"):
            if strategy == "RerunOnFailure" and vmi is not None and vmi.phase == "Failed":
                return "RerunOnFailure does not support starting VM from failed state"
            restart = vmi is not None and (
                (strategy == "RerunOnFailure" and vmi.phase == "Succeeded")
                or (strategy == "Manual" and final)
            )
            if restart and vmi is not None:
                requests.append({"action": STOP, "uid": vmi.metadata.uid})
            requests.append({"action": START})
        else:
            return f"{strategy} does not support manual start requests"
    else:
        if strategy == "Halted":
            return "VM is not running"
        if strategy in ("RerunOnFailure", "Manual"):
            if vmi is None or final:
                return "VM is not running"
            requests.append({"action": STOP, "uid": vmi.metadata.uid})
        elif strategy in ("Always", "Once"):
            running_spec = False
        else:
            return f"{strategy} does not support manual stop requests"
    if running_spec is not None:
        value = running_spec

        def change(current: VirtualMachine) -> VirtualMachine | None:
            raw = wire(current)
            if "runStrategy" in raw["spec"]:
                raw["spec"]["runStrategy"] = "Always" if value else "Halted"
            else:
                raw["spec"]["running"] = value
            return VirtualMachine.from_dict(raw)

        await modify(client, VirtualMachine, name, namespace, change)
        return None

    def ask(current: VirtualMachine) -> VirtualMachine | None:
        raw = wire(current)
        status = raw.setdefault("status", {})
        status["stateChangeRequests"] = [*(status.get("stateChangeRequests") or []), *requests]
        return VirtualMachine.from_dict(raw)

    await modify(client, VirtualMachine, name, namespace, ask, status=True)
    return None
