"""Invariants of DESIGN §2 checked on the embedded cluster's state after an event."""

from __future__ import annotations

from collections import defaultdict

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import DEVICES_ANNOTATION, GPUDevice, GPUUsageRecord
from gpu_binder.sim.cluster import Cluster


def check_cluster(c: Cluster) -> list[str]:
    """Violations of invariants 1, 2, 3 and 6 in the stored state; empty when all hold."""
    out: list[str] = []
    devices = {d.metadata.name: d for d in c.client.objects(GPUDevice)}
    vmis = c.client.objects(VirtualMachineInstance)
    nodes_of: dict[str, set[str]] = defaultdict(set)
    for d in devices.values():
        b, a = d.status.binding, d.status.attachment
        # A Lost device still used by a running VMI may sit beside a rebound set.
        if b is not None and not (d.status.phase == "Lost" and a is not None):
            nodes_of[b.vm.key].add(d.spec.node_name)
        if a is not None:
            if b is None:
                out.append(f"1: {d.metadata.name} attached to {a.vmi.key} but bound to no VM")
            else:
                vmi = next((v for v in vmis if v.metadata.uid == a.vmi.uid), None)
                owner = (vmi.vm_name or vmi.metadata.name) if vmi else None
                if vmi is not None and owner != b.vm.name:
                    out.append(
                        f"1: {d.metadata.name} attached to {a.vmi.key} of another VM "
                        f"than {b.vm.key}"
                    )
    for key, nodes in nodes_of.items():
        if len(nodes) > 1:
            out.append(f"2: the set of {key} spans nodes {sorted(nodes)}")
    for v in vmis:
        if not v.live or v.phase != "Running":
            continue
        owner = f"{v.metadata.namespace}/{v.vm_name or v.metadata.name}"
        for name in (v.metadata.annotations.get(DEVICES_ANNOTATION) or "").split(","):
            used = devices.get(name)
            if not name or used is None:
                continue
            if used.status.binding is None or used.status.binding.vm.key != owner:
                out.append(f"3: {name} used by running {v.key} is bound elsewhere")
    records: dict[tuple[str, str], int] = defaultdict(int)
    for r in c.client.objects(GPUUsageRecord):
        records[(r.spec.vmi.uid, r.spec.device)] += 1
        if r.spec.end is not None and r.spec.end < r.spec.start:
            out.append(f"6: record {r.metadata.name} ends before it starts")
    for (uid, dev), n in records.items():
        if n > 1:
            out.append(f"6: {n} records for one attachment of {dev} by VMI {uid}")
    return out
