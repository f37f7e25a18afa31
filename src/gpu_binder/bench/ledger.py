"""Whether a burst of starts left the ledger whole: every GPU bound to the burst's VMs has
its Reserved record (bind to attachment) and its Attached record, once the binder caught
up with its bookkeeping. A start's reserved seconds went unrecorded when its VMI was
scheduled before a full pass saw the GPU bound (35% of a 200-VM burst's GPUs, found here)."""

from __future__ import annotations

import asyncio
import time

from gpu_binder.api.types import GPUDevice, GPUUsageRecord, RecordKind
from gpu_binder.client.errors import ApiError
from gpu_binder.kube import KubeClient

# The API server's answer to a list its watch cache is too far behind to serve ("Too
# large resource version"), which a burst on two cores brings about: asked again.
LAGGING = 504


async def unrecorded(
    client: KubeClient, namespace: str, ledger: str, timeout: float = 60.0
) -> dict[str, float]:
    """The namespace's bound GPUs and how many lack each kind of record, waiting until none
    does or timeout seconds passed."""
    t = time.perf_counter()
    while True:
        try:
            bound = (await client.list(GPUDevice)).items
            records = (await client.list(GPUUsageRecord, ledger)).items
        except ApiError as e:
            if e.code != LAGGING or time.perf_counter() - t >= timeout:
                raise
            await asyncio.sleep(1.0)
            continue
        devices = [
            d.metadata.name
            for d in bound
            if d.status.binding is not None and d.status.binding.vm.namespace == namespace
        ]
        kinds: dict[RecordKind, set[str]] = {RecordKind.ATTACHED: set(), RecordKind.RESERVED: set()}
        for r in records:
            if r.spec.namespace == namespace:
                kinds[r.spec.kind].add(r.spec.device)
        missing = {k: sum(1 for d in devices if d not in seen) for k, seen in kinds.items()}
        waited = time.perf_counter() - t
        if not any(missing.values()) or waited >= timeout:
            return {
                "gpus": len(devices),
                "without_attached_record": missing[RecordKind.ATTACHED],
                "without_reserved_record": missing[RecordKind.RESERVED],
                "waited_s": round(waited, 1),
            }
        await asyncio.sleep(1.0)
