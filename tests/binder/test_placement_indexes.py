"""The World's indexes — CPU and memory per node, nodes by free state, the order mix, the
nodes that are down, what each tenant holds — kept by events, always equal to what a
recount from scratch finds."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_binder.api.kubevirt import Node, VirtualMachine
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    FINALIZER,
    Binding,
    BindReason,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceSpec,
    GPUDeviceStatus,
    ObjectRef,
    Phase,
    device_name,
)
from gpu_binder.cache import World
from gpu_binder.cache.deviceindex import is_free
from gpu_binder.cache.world import demands_of
from gpu_binder.client.interface import WatchEvent
from gpu_binder.placement import UNLIMITED

from .cluster import T0, pci

NODES = ("n0", "n1", "n2")
SLOTS = 4
VMS = ("vm0", "vm1", "vm2", "vm3")
# How many of the newest orders the world's mix counts here: fewer than the VMs.
RECENT = 2
RESOURCE = "nvidia.com/H100"


def put(world: World, obj: Any, kind: str = "MODIFIED") -> None:
    world.apply(WatchEvent(kind, obj))  # type: ignore[arg-type]


def node(name: str, cpu: int | None, ready: bool = True) -> Node:
    allocatable = {} if cpu is None else {"cpu": str(cpu), "memory": f"{cpu}Gi"}
    return Node.from_dict(
        {
            "metadata": {"name": name},
            "status": {
                "conditions": [{"type": "Ready", "status": str(ready)}],
                "allocatable": allocatable,
            },
        }
    )


def created(name: str) -> datetime:
    """vm0 is the oldest VM, vm3 the newest, whatever order they are seen in."""
    return T0 + timedelta(minutes=VMS.index(name))


def vm(name: str, gpus: int, cpu: int) -> VirtualMachine:
    return VirtualMachine.from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": "t",
                "uid": name,
                "creationTimestamp": created(name).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "spec": {
                "running": True,
                "template": {
                    "spec": {
                        "domain": {
                            "devices": {"gpus": [{"deviceName": RESOURCE}] * gpus},
                            "resources": {"requests": {"cpu": str(cpu), "memory": f"{cpu}Gi"}},
                        }
                    }
                },
            },
        }
    )


def device(node_name: str, slot: int, vm_name: str | None) -> GPUDevice:
    binding = None
    if vm_name is not None:
        binding = Binding(
            vm=ObjectRef(namespace="t", name=vm_name, uid=vm_name),
            bound_at=T0,
            reason=BindReason.ORDER,
        )
    return GPUDevice(
        metadata=ObjectMeta(name=device_name(node_name, pci(slot)), finalizers=(FINALIZER,)),
        spec=GPUDeviceSpec(
            node_name=node_name, pci_address=pci(slot), slot=slot, device_id="0x2330"
        ),
        status=GPUDeviceStatus(
            class_name="h100",
            phase=Phase.BOUND if binding else Phase.AVAILABLE,
            binding=binding,
        ),
    )


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("node"),
            st.sampled_from(NODES),
            st.one_of(st.none(), st.integers(8, 64)),
            st.booleans(),
        ),
        st.tuples(st.just("unnode"), st.sampled_from(NODES)),
        st.tuples(st.just("vm"), st.sampled_from(VMS), st.integers(1, 3), st.integers(0, 16)),
        st.tuples(st.just("unvm"), st.sampled_from(VMS)),
        st.tuples(
            st.just("bind"),
            st.sampled_from(NODES),
            st.integers(0, SLOTS - 1),
            st.one_of(st.none(), st.sampled_from(VMS)),
        ),
    ),
    max_size=40,
)


def recount(world: World) -> dict[str, object]:
    d = world.devices
    used: Counter[str] = Counter()
    mem: Counter[str] = Counter()
    for key, names in d.by_vm.items():
        cpu, memory = d.resources.request(key)
        for n in {d.by_name[name].spec.node_name for name in names}:
            used[n] += cpu
            mem[n] += memory
    states: dict[tuple[int, int, int], list[str]] = {}
    pools: Counter[tuple[str, int, int, int]] = Counter()
    free_count = 0
    for dev in d.by_name.values():
        free_count += is_free(dev)
    for n in NODES:
        free = sum(1 for x in d.names_on(n) if is_free(d.by_name[x]))
        if free:
            cpu_alloc, mem_alloc = d.resources.allocatable_of(n)
            cpu_free = UNLIMITED if cpu_alloc == UNLIMITED else cpu_alloc - used[n]
            mem_free = UNLIMITED if mem_alloc == UNLIMITED else mem_alloc - mem[n]
            states.setdefault((free, cpu_free, mem_free), []).append(n)
            pools[("h100", len(d.names_on(n)), cpu_alloc, mem_alloc)] += free
    demands: Counter[object] = Counter()
    # The mix counts the newest RECENT VMs.
    newest = sorted(world.vms.values(), key=lambda v: created(v.metadata.name))[-RECENT:]
    for v in newest:
        for dem in demands_of(world.named_order(v.key), (), v.cpu_milli, v.memory_bytes):
            demands[dem] += 1
    held: Counter[tuple[str, str, str]] = Counter()
    for dev in d.by_name.values():
        if (b := dev.status.binding) is not None:
            state = "attached" if dev.status.attachment else "bound"
            held[(b.vm.namespace, dev.status.class_name, state)] += 1
    return {
        "states": states,
        "pools": dict(pools),
        "free": free_count,
        "mix": dict(demands),
        "held": dict(held),
    }


@settings(max_examples=80, deadline=None)
@given(ops)
def test_the_indexes_equal_a_recount_after_any_events(script: list[tuple[Any, ...]]) -> None:
    world = World(recent_orders=RECENT)
    put(
        world,
        GPUClass(metadata=ObjectMeta(name="h100"), spec=GPUClassSpec(resource_name=RESOURCE)),
        "ADDED",
    )
    for n in NODES:
        put(world, node(n, 32), "ADDED")
        for slot in range(SLOTS):
            put(world, device(n, slot, None), "ADDED")
    for op in script:
        if op[0] == "node":
            put(world, node(op[1], op[2], op[3]))
        elif op[0] == "unnode":
            if op[1] in world.nodes:
                put(world, world.nodes[op[1]], "DELETED")
        elif op[0] == "vm":
            put(world, vm(op[1], op[2], op[3]))
        elif op[0] == "unvm":
            v = world.vms.get(f"t/{op[1]}")
            if v is not None:
                put(world, v, "DELETED")
        else:
            put(world, device(op[1], op[2], op[3]))
    expected = recount(world)
    d = world.devices
    assert {s: sorted(ns) for s, ns in d.states.groups.get("h100", {}).items()} == expected[
        "states"
    ]
    assert d.free_count["h100"] == expected["free"]
    assert d.pool_free == expected["pools"]
    assert dict(world.mix.counts) == expected["mix"]
    assert d.held == expected["held"]
    down = {n for n in d.by_node if n not in world.nodes or not world.nodes[n].ready}
    assert down <= world.down_nodes
