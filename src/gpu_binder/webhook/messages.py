"""The webhook's words: why a VMI is refused or admitted as it is, for its tenant."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_binder.binder import Config
from gpu_binder.webhook.target import Target


def named_like_a_vm(target: Target) -> str:
    return (
        f"a VMI with GPUs and no VirtualMachine owner cannot take the name of "
        f"VirtualMachine {target.vm_name}: KubeVirt's VM controller claims a VMI of its "
        "name, and the VM's GPUs are not this VMI's; name the VMI otherwise, or start the VM"
    )


def timeout_message(config: Config) -> str:
    seconds = config.bind_timeout.total_seconds()
    return f"no answer from gpu-binder within {seconds:g}s; KubeVirt will retry"


def dry_run_warning(wanted: Mapping[str, int], config: Config, move: str = "") -> str:
    order = ", ".join(f"{n} × {c}" for c, n in sorted(wanted.items()))
    wait = f"waits up to {config.bind_timeout.total_seconds():g}s"
    if move:
        return (
            f"dry run: the VM's GPU set must move first ({move}), so the VMI is not "
            f"pinned; a real create asks gpu-binder to move {order} and {wait}"
        )
    return (
        f"dry run: the VM holds no complete GPU set, so the VMI is not pinned; a real create "
        f"asks gpu-binder to bind {order} and {wait}"
    )
