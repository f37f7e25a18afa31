"""The status the VM controller keeps on a VM (kubevirt/kubevirt
`pkg/virt-controller/watch/vm/vm.go`, `updateStatus`): the first state change request
trimmed once done (`isTrimFirstChangeRequestNeeded`), the start failure backoff
(`syncStartFailureStatus`, `calculateStartBackoffTime`), conditions, `printableStatus`
(`setPrintableStatus`); and finalizer removal."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.sim.builders import iso
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.runstrategy import AUTO_RESTART, START, STOP

ENDED = ("Succeeded", "Failed")
RESTART_REQUIRED = "RestartRequired"
# vm.go: defaultMaxCrashLoopBackoffDelaySeconds.
MAX_START_FAILURE_DELAY = 300


def sync_start_failure(
    status: dict[str, Any],
    vmi: VirtualMachineInstance | None,
    strategy: str,
    now: datetime,
    rng: random.Random,
) -> None:
    """syncStartFailureStatus: count a VMI that ended before it ran, with the time its VM
    may start again (`now` is virt-controller's clock)."""
    ran = vmi is not None and any(
        t.get("phase") == "Running"
        for t in (vmi.raw.get("status") or {}).get("phaseTransitionTimestamps") or ()
    )
    if ran or strategy not in AUTO_RESTART:
        status.pop("startFailure", None)
        return
    if vmi is None or vmi.phase not in ENDED:
        return
    failure = status.get("startFailure") or {}
    if failure.get("lastFailedVMIUID") == vmi.metadata.uid:
        return
    count = int(failure.get("consecutiveFailCount") or 0) + 1
    delay = start_backoff(count, MAX_START_FAILURE_DELAY, rng)
    status["startFailure"] = {
        "lastFailedVMIUID": vmi.metadata.uid,
        "retryAfterTimestamp": iso(now + timedelta(seconds=delay)),
        "consecutiveFailCount": count,
    }


def start_backoff(count: int, max_delay: int, rng: random.Random) -> int:
    """vm.go calculateStartBackoffTime: 10 s × failures², plus up to half again, capped."""
    interval = max(max_delay // 30, 10)
    delay = interval * max(count, 1) ** 2
    delay += rng.randrange(delay // 2 + 1)
    return min(delay, max_delay)


def request_done(request: dict[str, Any], vmi: VirtualMachineInstance | None) -> bool:
    """isTrimFirstChangeRequestNeeded."""
    if request.get("action") == STOP:
        return vmi is None or not request.get("uid") or request["uid"] != vmi.metadata.uid
    if request.get("action") == START:
        return vmi is not None and not vmi.being_deleted and vmi.phase not in ENDED
    return False


def printable(
    vm: VirtualMachine, vmi: VirtualMachineInstance | None, strategy: str, status: dict[str, Any]
) -> str:
    """setPrintableStatus, first match wins (of the statuses the sim can reach)."""
    final = vmi is not None and vmi.phase in ENDED
    if vm.metadata.deletion_timestamp is not None:
        return "Terminating"
    if vmi is not None and not final and vmi.being_deleted:
        return "Stopping"
    if vmi is not None and vmi.phase == "Running":
        return "Running"
    if vmi is not None and vmi.phase in ("", "Pending", "Scheduling", "Scheduled"):
        return "Starting"
    failures = int((status.get("startFailure") or {}).get("consecutiveFailCount") or 0)
    if (vmi is None or final) and failures > 0 and strategy in AUTO_RESTART:
        return "CrashLoopBackOff"
    if vmi is None or final:
        return "Stopped"
    if strategy == "WaitAsReceiver":
        return "WaitingForReceiver"
    return "Unknown"


def set_condition(status: dict[str, Any], type_: str, message: str, now: datetime) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != type_]
    old = next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old else iso(now)
    conditions.append(
        {"type": type_, "status": "True", "message": message, "lastTransitionTime": since}
    )
    status["conditions"] = conditions


def clear_condition(status: dict[str, Any], type_: str) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != type_]
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)


async def drop_finalizer(client: MemoryClient, kind: type[Any], obj: Any, finalizer: str) -> int:
    if finalizer not in obj.metadata.finalizers:
        return 0
    uid = obj.metadata.uid

    def change(current: Any) -> Any:
        if current.metadata.uid != uid or finalizer not in current.metadata.finalizers:
            return None
        raw = wire(current)
        raw["metadata"]["finalizers"] = [f for f in current.metadata.finalizers if f != finalizer]
        return kind.from_dict(raw)

    written = await modify(client, kind, obj.metadata.name, obj.metadata.namespace, change)
    return 0 if written is None else 1
