"""`kubectl gpu check`: does gpu-binder's webhook answer? (`helm test` runs it in a pod.)

Two VMIs are created with dryRun through the API server, which calls the admission
webhooks as for a real start and stores nothing:

- one without GPUs must be admitted: VMs without GPUs never depend on gpu-binder;
- one naming a GPU slot resource it was not bound must be denied *by gpu-binder*, with its
  reason. Only a webhook that answered can say that: a webhook the API server cannot reach
  refuses with "failed calling webhook" (failurePolicy Fail) or lets the VMI in unpinned
  (Ignore), and this check says which.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_binder.api.kinds import resource_of
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.slots import format_slot
from gpu_binder.client.errors import ApiError
from gpu_binder.kube import KubeClient
from gpu_binder.kube.client import path

# A slot resource no class serves (vendor and device 0000): nobody's GPU, so whoever names
# it is denied, and no VM's set could ever make it valid.
PROBE_SLOT = format_slot("0x0000", "0x0000", 0)


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str


def probe_vmi(namespace: str, slot: str | None) -> dict[str, Any]:
    devices: dict[str, Any] = {}
    if slot is not None:
        devices["gpus"] = [{"name": "probe", "deviceName": slot}]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": f"gpu-binder-check-{uuid.uuid4().hex[:8]}", "namespace": namespace},
        "spec": {"domain": {"devices": devices, "resources": {"requests": {"memory": "64Mi"}}}},
    }


async def _dry_run_create(client: KubeClient, vmi: dict[str, Any]) -> ApiError | None:
    url = path(resource_of(VirtualMachineInstance), vmi["metadata"]["namespace"])
    try:
        await client.request("POST", url, vmi, query={"dryRun": "All"})
    except ApiError as e:
        return e
    return None


async def check(client: KubeClient, namespace: str) -> list[Finding]:
    findings: list[Finding] = []
    refused = await _dry_run_create(client, probe_vmi(namespace, None))
    if refused is None:
        findings.append(Finding(True, "a VMI without GPUs is admitted"))
    else:
        findings.append(Finding(False, f"a VMI without GPUs is refused: {refused.message}"))
    answer = await _dry_run_create(client, probe_vmi(namespace, PROBE_SLOT))
    if answer is None:
        findings.append(
            Finding(
                False,
                f"a VMI naming GPU slot {PROBE_SLOT} was admitted: no gpu-binder webhook "
                f"answered (none installed, namespace {namespace} excluded, or failurePolicy "
                "Ignore with the binder unreachable)",
            )
        )
    elif "denied the request" in answer.message and PROBE_SLOT in answer.message:
        findings.append(
            Finding(True, "the webhook answers: a VMI naming a slot it was not bound is denied")
        )
    elif "failed calling webhook" in answer.message:
        findings.append(
            Finding(False, f"the API server cannot reach the webhook: {answer.message}")
        )
    else:
        findings.append(
            Finding(False, f"a VMI naming a slot was refused by someone else: {answer.message}")
        )
    return findings


def render(findings: list[Finding], mark: Callable[[bool], str]) -> str:
    return "".join(f"{mark(f.ok)} {f.what}\n" for f in findings)
