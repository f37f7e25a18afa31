"""`gpu-binder bench webhook`: VMI create → admitted through a real API server and webhook.

A local control plane (envtest) gets N simulated GPUs (8 per node); a binder settles them,
then a fresh binder's cold start (list + first full pass) is timed; then VMIs are created
through the API server, which calls the webhook over TLS: for VMs whose set is already
bound, and for standalone VMIs that need a bind request answered by the binder.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.binder import PASS_KEY, Config
from gpu_binder.devcluster import fleet
from gpu_binder.envtest import ControlPlane, free_port
from gpu_binder.kube import KubeClient, connect
from gpu_binder.kube.manager import Manager, Options, WebhookOptions

NAMESPACE = "bench"
GPUS_PER_VMI = 2


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 1),
        "p99_ms": round(p99 * 1e3, 1),
        "max_ms": round(ordered[-1] * 1e3, 1),
        "samples": len(ordered),
    }


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, cp: ControlPlane, certs: Path, devices: int, samples: int) -> None:
        self.cp = cp
        self.nodes = max(1, devices // 8)
        self.samples = samples
        self.port = free_port()
        self.cert_file, self.key_file = cp.certs.ca.issue_serving("gpu-binder").write(certs, "tls")

    def manager(self, client: KubeClient, webhook: bool) -> Manager:
        options = Options(
            identity="bench",
            leader_elect=False,
            webhook=WebhookOptions(
                self.cert_file,
                self.key_file,
                "127.0.0.1",
                self.port,
                client_ca_file=self.cp.webhook_client.ca_file,
                client_names=(self.cp.webhook_client.name,),
            )
            if webhook
            else None,
            metrics_port=None,
        )
        return Manager(client, Config(), options)

    async def run(self) -> dict[str, Any]:
        async with await connect(str(self.cp.kubeconfig)) as admin:
            await admin.create(fleet.gpu_class(cleaning="None"))
            t = time.perf_counter()
            names = [f"node-{i:04d}" for i in range(self.nodes)]
            devices = await fleet.seed(admin, names)
            _say(f"seeded {devices} GPUs on {self.nodes} nodes in {time.perf_counter() - t:.1f}s")
            url = f"https://127.0.0.1:{self.port}"
            config = fleet.webhook_configuration(url, self.cp.ca_pem)
            await fleet.put_webhook_configuration(admin, config)
            await admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})

            await self._settle(devices)
            async with await connect(str(self.cp.kubeconfig)) as client:
                m = self.manager(client, webhook=True)
                stop = asyncio.Event()
                t = time.perf_counter()
                task = asyncio.create_task(m.run(stop))
                try:
                    await m.informers.wait_synced()
                    listed = time.perf_counter() - t
                    while not m.controller.completed.get(PASS_KEY):
                        await asyncio.sleep(0.005)
                    first = time.perf_counter() - t
                    cold = {"list_s": round(listed, 2), "list_and_first_pass_s": round(first, 2)}
                    _say(f"cold start: {cold}")
                    bound, requested = await self._admissions(admin, m)
                finally:
                    stop.set()
                    await task
        return {
            "devices": devices,
            "nodes": self.nodes,
            "cold_start": cold,
            "admit_already_bound": _ms(bound),
            "admit_needing_request": _ms(requested),
        }

    async def _settle(self, devices: int) -> None:
        """A first binder takes the agents' devices into its bookkeeping, as in a cluster."""
        t = time.perf_counter()
        async with await connect(str(self.cp.kubeconfig)) as client:
            m = self.manager(client, webhook=False)
            stop = asyncio.Event()
            task = asyncio.create_task(m.run(stop))
            while not _settled(m, devices):
                await asyncio.sleep(0.1)
            stop.set()
            await task
        _say(f"first binder settled in {time.perf_counter() - t:.1f}s")

    async def _admissions(self, admin: KubeClient, m: Manager) -> tuple[list[float], list[float]]:
        vms = [
            await admin.create(fleet.vm(NAMESPACE, f"vm-{i}", GPUS_PER_VMI))
            for i in range(self.samples)
        ]
        while any(len(m.world.devices.set_of(v.key)) < GPUS_PER_VMI for v in vms):
            await asyncio.sleep(0.05)
        bound = [
            await self._admit(admin, fleet.vmi(v, NAMESPACE, v.metadata.name, GPUS_PER_VMI))
            for v in vms
        ]
        _say(f"already bound: {_ms(bound)}")
        requested = [
            await self._admit(admin, fleet.vmi(None, NAMESPACE, f"solo-{i}", GPUS_PER_VMI))
            for i in range(self.samples)
        ]
        _say(f"needing a request: {_ms(requested)}")
        return bound, requested

    async def _admit(self, admin: KubeClient, vmi: VirtualMachineInstance) -> float:
        t = time.perf_counter()
        created = await admin.create(vmi)
        took = time.perf_counter() - t
        if "gpu.cozystack.io/devices" not in created.metadata.annotations:
            raise RuntimeError(f"VMI {vmi.metadata.name} was admitted unpinned")
        await admin.delete(VirtualMachineInstance, vmi.metadata.name, NAMESPACE)
        return took


def _settled(m: Manager, devices: int) -> bool:
    """A full pass over all devices wrote nothing, and no pass runs or waits."""
    c = m.controller
    last = c.results.get(PASS_KEY)
    return (
        len(m.world.devices) >= devices
        and last is not None
        and last.writes == 0
        and c.busy is None
        and len(m.queue) == 0
    )


def main(devices: int, samples: int = 100) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpu-binder-bench-") as tmp:
        cp = ControlPlane(progress=_say)
        with cp:
            _say(f"control plane up in {cp.startup_seconds:.1f}s")
            cp.install_crds(fleet.CRDS)
            return asyncio.run(Bench(cp, Path(tmp), devices, samples).run())
