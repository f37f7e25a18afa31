"""What a burst cost each process of the bench in CPU time, read from the kernel's own
account (`/proc/PID/stat`: user and system time): the API server, etcd, the scheduler,
the controller-manager, KWOK, gpu-binder, and the bench itself (KubeVirt's part).

On two cores every process of a burst competes for the same CPU, so a start is as slow
as what all of them spend on it: requests per start (bench.apicalls) count the API
server's work, not what each costs it, and a custom resource's write (schema, CEL,
managed fields, unstructured JSON) costs it more than a pod's."""

from __future__ import annotations

import os
from collections.abc import Mapping

TICKS = os.sysconf("SC_CLK_TCK")
# What `bench start` calls its own process: it plays KubeVirt's controllers.
BENCH = "bench (KubeVirt's part)"


def cpu_seconds(pid: int) -> float | None:
    """User + system seconds the process has used, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: the fields after its ")" are fixed.
    fields = stat[stat.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / TICKS


def account(pids: Mapping[str, int | None]) -> dict[str, float]:
    """CPU seconds so far of each named process that runs."""
    out = {}
    for name, pid in pids.items():
        seconds = cpu_seconds(pid) if pid is not None else None
        if seconds is not None:
            out[name] = seconds
    return out


def per_start(
    before: Mapping[str, float], after: Mapping[str, float], starts: int
) -> dict[str, float]:
    """CPU milliseconds per start of each process between two accounts, and their total."""
    out = {
        name: round((after[name] - before[name]) * 1e3 / max(1, starts), 1)
        for name in sorted(after)
        if name in before
    }
    out["total"] = round(sum(out.values()), 1)
    return out
