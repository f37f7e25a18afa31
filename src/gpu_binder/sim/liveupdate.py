"""The LiveUpdate rollout strategy, as the VM controller runs it (kubevirt/kubevirt
`pkg/virt-controller/watch/vm/vm.go`).

- `restart_required` is `syncRestartRequired`: the VM template, its instancetype applied,
  against the spec recorded at the VMI's start (sim.startrevisions), all but what is
  live-updatable (under LiveUpdate: nodeSelector, affinity, tolerations; CPU sockets and
  guest memory are not modelled); a change sets the RestartRequired condition. The VMI
  is not compared: a webhook's changes to it never require a restart.
- `sync` is `handleAffinityChangeRequest` with `VMIAffinityPatch` and `VMNodeSelectorPatch`:
  while no restart is required, a VM-owned VMI's affinity and nodeSelector are made the
  template's — replaced, or removed when the template has none — in any phase, Pending
  included (only a VMI being deleted is left alone).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.sim.clocks import CONTROLLER, Clocks
from gpu_binder.sim.instancetypes import with_instancetype
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.objects import json_copy
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.startrevisions import StartRevisions
from gpu_binder.sim.vmstatus import RESTART_REQUIRED, clear_condition, set_condition

# Template fields the LiveUpdate rollout strategy changes on a running VMI
# (syncRestartRequired): no restart is needed when only they changed.
LIVE_UPDATABLE = ("nodeSelector", "affinity", "tolerations")


class LiveUpdate:
    def __init__(
        self,
        client: MemoryClient,
        clocks: Clocks,
        starts: StartRevisions,
        live_update: Callable[[], bool],
    ) -> None:
        self.client = client
        self.clocks = clocks
        self.starts = starts
        self.live_update = live_update
        self.syncs = 0

    def restart_required(
        self, vm: VirtualMachine, vmi: VirtualMachineInstance | None, status: dict[str, Any]
    ) -> bool:
        """syncRestartRequired: whether the template, its instancetype applied, changed
        since the VMI started in more than the live-updatable fields; sets or clears the
        condition in status."""
        last = self.starts.spec(vm) if vmi is not None else None
        if last is None:
            clear_condition(status, RESTART_REQUIRED)
            return False
        if last.get("instancetype"):
            before = self.template(VirtualMachine.from_dict({**vm.raw, "spec": last}))
        else:
            before = (last.get("template") or {}).get("spec") or {}
        current = self.template(vm)
        if self.live_update():
            before = {k: v for k, v in before.items() if k not in LIVE_UPDATABLE}
            current = {k: v for k, v in current.items() if k not in LIVE_UPDATABLE}
        if before != current:
            set_condition(
                status,
                RESTART_REQUIRED,
                "a non-live-updatable field was changed in the template spec",
                self.clocks.now(CONTROLLER),
            )
            return True
        clear_condition(status, RESTART_REQUIRED)
        return False

    def template(self, vm: VirtualMachine) -> dict[str, Any]:
        """The template spec a start would run (its instancetype applied); not a copy when
        the VM names no instancetype: read it, never change it."""
        spec = vm.raw.get("spec") or {}
        template = (spec.get("template") or {}).get("spec") or {}
        if not spec.get("instancetype"):
            return template
        return with_instancetype(self.client, vm)

    def will_sync(self, vm: VirtualMachine, vmi: VirtualMachineInstance) -> bool:
        """Whether the next sync of vm changes its VMI's affinity or nodeSelector."""
        if not self.live_update() or vmi.being_deleted:
            return False
        status = json_copy(vm.raw.get("status") or {})
        conditions = {c.get("type") for c in status.get("conditions") or []}
        if RESTART_REQUIRED in conditions or self.restart_required(vm, vmi, status):
            return False
        return self.wanted(vm, vmi) is not None

    def wanted(self, vm: VirtualMachine, vmi: VirtualMachineInstance) -> dict[str, Any] | None:
        """The template's affinity and nodeSelector where the VMI's differ, else None."""
        template = self.template(vm)
        wanted = {f: template.get(f) for f in ("affinity", "nodeSelector")}
        have = {f: (vmi.raw.get("spec") or {}).get(f) for f in ("affinity", "nodeSelector")}
        if all(_semantic(wanted[f]) == _semantic(have[f]) for f in wanted):
            return None
        return wanted

    async def sync(self, vm: VirtualMachine, vmi: VirtualMachineInstance) -> int:
        """handleAffinityChangeRequest: the VMI's affinity and nodeSelector become the
        template's (instancetype applied), replaced or removed."""
        if vmi.being_deleted:
            return 0
        wanted = self.wanted(vm, vmi)
        if wanted is None:
            return 0
        uid = vmi.metadata.uid

        def patch(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.metadata.uid != uid:
                return None
            raw = wire(current)
            for f, value in wanted.items():
                if value is None:
                    raw["spec"].pop(f, None)
                else:
                    raw["spec"][f] = json_copy({"v": value})["v"]
            return VirtualMachineInstance.from_dict(raw)

        written = await modify(
            self.client, VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace, patch
        )
        if written is None:
            return 0
        self.syncs += 1
        return 1


def _semantic(value: Any) -> Any:
    """equality.Semantic: an empty map or list is what an absent one is."""
    return None if value in (None, {}, []) else value
