"""Making one staged write (binder.writes) through the client, by its type: I/O only.

What a write's answer means for a step is the step's, carried by the write as a hook
(binder.writes); the writer calls it and writes through to the world only what the API
server says is gone, or the copy a Reserved record was opened with.
"""

from __future__ import annotations

import contextlib
from typing import Any, assert_never

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.kubevirt import Node
from gpu_binder.api.types import DEVICES_ANNOTATION, GPUDevice
from gpu_binder.binder import ledgerwrites
from gpu_binder.binder.writes import (
    Annotations,
    Answer,
    Apply,
    Create,
    Delete,
    Finalizers,
    NodeCondition,
    OpenRecord,
    Status,
    SyncCopy,
    Update,
    WriteCopy,
    WriteOp,
)
from gpu_binder.cache.world import World
from gpu_binder.client.errors import AlreadyExists, NotFound
from gpu_binder.client.interface import Client, WatchEvent


class Writer:
    def __init__(self, client: Client, world: World) -> None:
        self.client = client
        self.world = world

    async def make(self, op: WriteOp) -> Any:
        """The object as written (None when there is none to enter the world)."""
        c = self.client
        match op:
            case Status(obj=obj):
                return await c.update_status(obj)
            case Update(obj=GPUDevice() as d):
                # A device's only update is its finalizer (the agent owns the spec, status
                # is a subresource): a patch of metadata.finalizers, so the binder holds
                # patch, not update, on GPUDevices and cannot rewrite their spec whole.
                return await self._finalizers(d)
            case Update(obj=obj):
                return await c.update(obj)
            case Create(obj=obj, on_exists=on_exists):
                try:
                    return await c.create(obj)
                except AlreadyExists:
                    meta = obj.metadata
                    found = await c.get(type(obj), meta.name, meta.namespace)
                    if on_exists is not None:
                        on_exists(found)
                    return found
            case OpenRecord(obj=rec, on_opened=on_opened):
                opened, copy = await ledgerwrites.open_record(c, rec)
                if on_opened is not None:
                    on_opened(opened)
                if copy is not None:
                    self.world.apply(WatchEvent("MODIFIED", copy))
                return opened
            case WriteCopy(obj=copy):
                return await ledgerwrites.write_copy(c, copy)
            case SyncCopy(obj=copy, on_tried=on_tried):
                if on_tried is not None:
                    on_tried(copy)
                return await ledgerwrites.sync_copy(c, copy)
            case Apply(obj=obj):
                return await c.apply(KubeVirt, obj.body)
            case Finalizers(obj=obj):
                return await self._finalizers(obj)
            case Annotations(obj=obj):
                meta = obj.metadata
                value = meta.annotations.get(DEVICES_ANNOTATION)
                patch = {"metadata": {"annotations": {DEVICES_ANNOTATION: value}}}
                return await c.patch(type(obj), meta.name, meta.namespace, patch)
            case NodeCondition(node=node, condition=cond):
                # The GPUDegraded condition alone, by a strategic merge patch of
                # nodes/status: no GET and PUT of the whole status, which would need update
                # rights on every field of every node and race the kubelet's heartbeats.
                return await c.set_condition(Node, node, "", cond.to_dict())
            case Delete(obj=obj):
                meta = obj.metadata
                # Deleted already (a bind request by its webhook) is as good.
                with contextlib.suppress(NotFound):
                    await c.delete(type(obj), meta.name, meta.namespace)
                # Write-through, as for the other writes: the next pass does not delete it
                # again.
                self.world.apply(WatchEvent("DELETED", obj))
                return None
            case Answer():
                return None  # in memory only: the reconciler tells it to the webhook
            case _:
                assert_never(op)

    async def _finalizers(self, obj: Any) -> Any:
        """Set metadata.finalizers by a merge patch, which touches nothing else of an object
        others own; its resourceVersion makes a stale decision a 409, like every write."""
        meta = obj.metadata
        patch = {
            "metadata": {
                "finalizers": list(meta.finalizers),
                "resourceVersion": meta.resource_version,
            }
        }
        written = await self.client.patch(type(obj), meta.name, meta.namespace, patch)
        if written.metadata.deletion_timestamp is not None and not written.metadata.finalizers:
            # The last finalizer of a deleted object: it is gone, as its watch will say.
            self.world.apply(WatchEvent("DELETED", written))
            return None
        return written
