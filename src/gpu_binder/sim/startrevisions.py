"""The VM controller's start revisions: the VM's spec as each VMI started, in a
ControllerRevision `revision-start-vm-<vm uid>-<generation>` owned by the VM
(kubevirt/kubevirt `pkg/virt-controller/watch/vm/vm.go`, `createVMRevision`,
`patchVMRevision`, `deleteOlderVMRevision`); `syncRestartRequired` compares the template
with the latest (`getLastVMRevisionSpec`)."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.instancetype import ControllerRevision
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.client.errors import AlreadyExists, NotFound
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.builders import owner_reference
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.objects import json_copy

START_REVISION_PREFIX = "revision-start-vm-"


class StartRevisions:
    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        # The start revisions of each VM (by uid): name -> revision (generation).
        self._starts: dict[str, dict[str, int]] = {}
        for rev in client.objects(ControllerRevision):
            self._on_revision(rev, deleted=False)
        client.subscribe(self._on_event, (ControllerRevision,))

    async def record(self, vm: VirtualMachine) -> int:
        """createVMRevision: the VM's spec at this start, older start revisions deleted;
        returns the writes made."""
        name = f"{START_REVISION_PREFIX}{vm.metadata.uid}-{vm.metadata.generation}"
        writes = 0
        for old in sorted(self._starts.get(vm.metadata.uid, {})):
            if old == name:
                return writes
            try:
                await self.client.delete(ControllerRevision, old, vm.metadata.namespace)
                writes += 1
            except NotFound:
                pass
        spec = json_copy(vm.raw.get("spec") or {})
        ref = ((vm.raw.get("status") or {}).get("instancetypeRef") or {}).get(
            "controllerRevisionRef"
        ) or {}
        if isinstance(spec.get("instancetype"), dict) and ref.get("name"):
            spec["instancetype"]["revisionName"] = ref["name"]
        try:
            await self.client.create(
                ControllerRevision.from_dict(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ControllerRevision",
                        "metadata": {
                            "name": name,
                            "namespace": vm.metadata.namespace,
                            "ownerReferences": [owner_reference(vm)],
                        },
                        "data": {"spec": spec},
                        "revision": vm.metadata.generation,
                    }
                )
            )
        except AlreadyExists:
            return writes
        return writes + 1

    def spec(self, vm: VirtualMachine) -> dict[str, Any] | None:
        """getLastVMRevisionSpec: the spec of the VM's latest start revision."""
        found = self._starts.get(vm.metadata.uid)
        if not found:
            return None
        name = max(found, key=found.__getitem__)
        rev = self.client.peek(ControllerRevision, name, vm.metadata.namespace)
        spec = rev.data.get("spec") if rev is not None else None
        return spec if isinstance(spec, dict) else None

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is ControllerRevision:
            self._on_revision(event.object, deleted=event.type == "DELETED")

    def _on_revision(self, rev: ControllerRevision, deleted: bool) -> None:
        if not rev.metadata.name.startswith(START_REVISION_PREFIX):
            return
        owner = rev.metadata.owner("VirtualMachine")
        if owner is None:
            return
        starts = self._starts.setdefault(owner.uid, {})
        if deleted:
            starts.pop(rev.metadata.name, None)
            if not starts:
                del self._starts[owner.uid]
        else:
            starts[rev.metadata.name] = rev.revision
