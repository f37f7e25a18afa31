"""Simulated KubeVirt control plane and scheduler: virt-controller's VM and VMI controllers
(sim.vmcontroller, sim.vmicontroller), virt-api's VMI mutation and the start/stop
subresources (sim.runstrategy), and kube-scheduler placing the pods (sim.scheduler).

A VMI is created through admission (`admit`: gpu-binder's webhook, the VMI as admitted or
the denial), after virt-api's mutator has put its foreground finalizer on it
(`pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go`). Its pods are created
through pod admission (`admit_pod`: the pod webhooks; none by default, as on a cluster
without gpu-binder's pod webhook).

The VM and VMI controllers work from one queue each and see the same events, in an order
nobody fixes: which of them acts on a new VMI first — the VM controller, whose affinity
sync undoes an affinity the webhook added, or the VMI controller, which renders the
launcher pod from the VMI as it is — is a race. The VMI controller's first pass on a VMI
only annotates it, so the VM controller's patch usually lands first: here it does for a
share `affinity_race` of the VMIs, drawn per VMI from the seed, its name and how many VMIs
of that name came before it, so a run decides alike whatever else changed how often the
parts were stepped (or the order of uids).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.client.errors import AlreadyExists
from gpu_binder.sim.clocks import Clocks
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.runstrategy import virtctl
from gpu_binder.sim.scheduler import Scheduler
from gpu_binder.sim.storage import Storage
from gpu_binder.sim.vmcontroller import VMController
from gpu_binder.sim.vmicontroller import AdmitPod, VMIController
from gpu_binder.sim.vmistatus import FOREGROUND_FINALIZER

# The webhook's decision: the VMI as admitted (patched), or the reason it was denied.
Admit = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | str]]


class KubeVirtSim:
    """virt-controller, virt-api and the scheduler, stepped by the driver.

    `live_update`: the KubeVirt CR's `vmRolloutStrategy` is LiveUpdate (KubeVirt's default
    since v1.6, `pkg/virt-config/virt-config.go`), under which the VM controller syncs a
    running VMI's affinity and nodeSelector to the template's; None reads it from the CR.
    """

    def __init__(
        self,
        client: MemoryClient,
        clock: Callable[[], datetime],
        admit: Admit | None = None,
        *,
        admit_pod: AdmitPod | None = None,
        clocks: Clocks | None = None,
        storage: Storage | None = None,
        seed: int = 0,
        live_update: bool | None = None,
        affinity_race: float = 0.75,
    ) -> None:
        self.client = client
        self.clock = clock
        self.admit = admit
        self.clocks = clocks or Clocks(clock)
        self.storage = storage or Storage(clock)
        self.rng = random.Random(seed)
        self.seed = seed
        self.affinity_race = affinity_race
        self.created = 0
        self.denials: list[tuple[str, str]] = []
        # Per VMI name: VMIs created so far, and whether the last one's race went to the
        # VM controller.
        self._generations: dict[str, int] = {}
        self._sync_wins: dict[str, bool] = {}
        self.vms = VMController(
            client, self.clocks, self._create_owned, self.rng, live_update=live_update
        )
        self.vmis = VMIController(
            client, self.clocks, self.storage, admit_pod, self.rng, waits=self._sync_first
        )
        self.scheduler = Scheduler(client, clock)

    # --- what users do ------------------------------------------------------------------

    async def set_running(self, namespace: str, name: str, running: bool) -> str | None:
        """`virtctl start` / `virtctl stop`; the refusal, or None."""
        return await virtctl(self.client, namespace, name, running)

    async def create_vmi(
        self, raw: dict[str, Any], *, admitted: bool = True
    ) -> VirtualMachineInstance | str:
        """Create a VMI through admission (or around gpu-binder's webhook, as when it is
        bypassed); returns the VMI or the denial message."""
        raw = {**raw, "metadata": {**raw.get("metadata", {})}}
        meta = raw["metadata"]
        meta["finalizers"] = [*meta.get("finalizers", []), FOREGROUND_FINALIZER]
        if admitted and self.admit is not None:
            answer = await self.admit(raw)
            if isinstance(answer, str):
                self.denials.append((f"{meta.get('namespace')}/{meta.get('name')}", answer))
                return answer
            raw = answer
        vmi = await self.client.create(VirtualMachineInstance.from_dict(raw))
        self.created += 1
        n = self._generations[vmi.key] = self._generations.get(vmi.key, 0) + 1
        draw = random.Random(f"{self.seed}/{vmi.key}/{n}").random()
        self._sync_wins[vmi.key] = draw < self.affinity_race
        return vmi

    async def _create_owned(self, raw: dict[str, Any]) -> VirtualMachineInstance | str:
        try:
            return await self.create_vmi(raw)
        except AlreadyExists as e:
            return str(e)

    # --- the controllers' work ------------------------------------------------------------

    async def start_vms(self) -> int:
        """The VM controller alone, until it has nothing left: new VMs' VMIs are created
        before anything else ran (its first pass on a VM only annotates it)."""
        writes = 0
        for _ in range(3):
            done = await self.vms.step()
            if not done:
                break
            writes += done
        return writes

    def _sync_first(self, vmi: VirtualMachineInstance) -> bool:
        """Whether the VM controller's affinity sync wins the race for this VMI and has yet
        to land: its pod waits for it."""
        return self._sync_wins.get(vmi.key, False) and self.vms.will_sync_affinity(vmi)

    async def step(self) -> int:
        """Each controller's queue once; then scheduling."""
        writes = await self.vms.step()
        writes += await self.vmis.step()
        return writes + await self.scheduler.step()
