"""The pass, as properties: placement through the binder, idempotence, and the invariants
after any sequence of tenant, admin and hardware events."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUDevice, Phase, RequestPhase
from gpu_binder.cache.deviceindex import is_free

from .cluster import NAMESPACE, T0, Cluster, check_invariants

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- placement through the binder -------------------------------------------------------


@PROPERTY
@given(
    st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=4),
    st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=8),
    st.sampled_from(["Pack", "Spread"]),
)
def test_the_binder_places_orders_oldest_first_by_its_policy(
    nodes: list[int], order_sizes: list[int], policy: str
) -> None:
    async def scenario() -> None:
        cluster = Cluster()
        cluster.gpu_class(policy=policy)
        for i, n in enumerate(nodes):
            cluster.node(f"node-{i}", n)
        for i, k in enumerate(order_sizes):
            cluster.vm(f"vm-{i}", k, created=T0 - timedelta(hours=len(order_sizes) - i))
        await cluster.settle()
        assert cluster.violations() == []
        # Replay the policy by hand, oldest first, and compare with what the binder did.
        free = {f"node-{i}": n for i, n in enumerate(nodes)}
        pick = min if policy == "Pack" else max
        for i, k in enumerate(order_sizes):
            devices = cluster.set_of(f"vm-{i}")
            fitting = {node: n - k for node, n in free.items() if n >= k}
            if not fitting:
                assert devices == [], f"vm-{i} bound beyond free capacity"
                continue
            assert len(devices) == k, f"vm-{i} fits on {sorted(fitting)} but got {devices}"
            node = cluster.node_of(f"vm-{i}")
            assert fitting[node] == pick(fitting.values()), (
                f"{policy} put vm-{i} ({k}) on {node} of {fitting}"
            )
            free[node] -= k

    run(scenario())


@PROPERTY
@given(
    st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=4),
    st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=6),
)
def test_a_pass_after_quiescence_writes_nothing(nodes: list[int], order_sizes: list[int]) -> None:
    async def scenario() -> None:
        cluster = Cluster()
        cluster.gpu_class()
        for i, n in enumerate(nodes):
            cluster.node(f"node-{i}", n)
        for i, k in enumerate(order_sizes):
            cluster.vm(f"vm-{i}", k, running=i % 2 == 0)
        await cluster.settle()
        for i in range(0, len(order_sizes), 2):
            if cluster.set_of(f"vm-{i}"):
                cluster.start(f"vm-{i}")
        await cluster.settle()
        before = cluster.client.writes
        await cluster.run()
        cluster.clock.advance(seconds=30)
        await cluster.run()
        assert cluster.client.writes == before

    run(scenario())


# --- any sequence of events ---------------------------------------------------------------

NODES = ("node-0", "node-1", "node-2")
VMS = tuple(f"vm-{i}" for i in range(5))
# VMIs with no VirtualMachine: each its own order.
SOLOS = ("solo-0", "solo-1")

events = st.one_of(
    st.tuples(
        st.just("create"), st.sampled_from(VMS), st.sampled_from([1, 1, 2, 3, 4]), st.booleans()
    ),
    st.tuples(st.just("start"), st.sampled_from(VMS)),
    st.tuples(st.just("stop"), st.sampled_from(VMS)),
    st.tuples(st.just("delete"), st.sampled_from(VMS)),
    st.tuples(st.just("vmi_fails"), st.sampled_from(VMS + SOLOS)),
    st.tuples(st.just("solo"), st.sampled_from(SOLOS), st.sampled_from([1, 2])),
    st.tuples(st.just("annotate"), st.sampled_from(VMS), st.sampled_from(NODES)),
    st.tuples(st.just("cordon"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("ready"), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("health"), st.sampled_from(NODES), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("unschedulable"), st.sampled_from(NODES), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("remove_device"), st.sampled_from(NODES), st.integers(0, 3)),
    st.tuples(st.just("tick"), st.sampled_from([1, 3, 6])),
    st.tuples(st.just("reset")),
    st.tuples(st.just("restart")),
    st.tuples(st.just("serve"), st.sampled_from(NODES), st.integers(2, 4)),
    st.tuples(st.just("unmanaged"), st.sampled_from(VMS), st.sampled_from(NODES)),
)
# The class the cluster's GPUs belong to: (policy, topology, cleaning).
classes = st.tuples(
    st.sampled_from(["Pack", "Spread"]),
    st.sampled_from(["Node", "NUMA"]),
    st.sampled_from(["Reset", "None"]),
)


@dataclass
class Observer:
    """Checks, after every pass, what can only be seen across passes (invariants 3 and 4)."""

    cluster: Cluster
    # Live attachments before the pass: device → (VM key, VMI uid).
    in_use: dict[str, tuple[str, str]]
    # Devices released into Cleaning, and when.
    released: dict[str, datetime]

    def before(self) -> None:
        self.in_use = {}
        vmis = {v.key: v for v in self.cluster.client.objects(VirtualMachineInstance)}
        for d in self.cluster.client.objects(GPUDevice):
            att, b = d.status.attachment, d.status.binding
            vmi = vmis.get(att.vmi.key) if att is not None else None
            if att and b and vmi and vmi.live and vmi.metadata.uid == att.vmi.uid:
                self.in_use[d.metadata.name] = (b.vm.key, att.vmi.uid)

    def after(self, aborted: bool) -> list[str]:
        # A pass aborted by a 409 may leave a set half moved (the target is bound before
        # the old devices are released, one write at a time); the next pass repairs it.
        out = world_drift(self.cluster)
        if not aborted:
            out += check_invariants(self.cluster.client) + ledger(self.cluster)
        vmis = {v.key: v for v in self.cluster.client.objects(VirtualMachineInstance)}
        for d in self.cluster.client.objects(GPUDevice):
            name, s = d.metadata.name, d.status
            held = self.in_use.get(name)
            if held is not None:
                vm_key, uid = held
                vmi = vmis.get(vm_key)
                still_live = vmi is not None and vmi.live and vmi.metadata.uid == uid
                if still_live and (s.binding is None or s.binding.vm.key != vm_key):
                    out.append(f"{name} was taken from {vm_key} while its VMI ran")
            if s.phase == Phase.CLEANING and s.released_at is not None:
                self.released.setdefault(name, s.released_at)
            released = self.released.get(name)
            if released is not None and s.phase in (Phase.AVAILABLE, Phase.BOUND):
                reset = d.spec.last_reset
                if reset is None or reset < released:
                    out.append(f"{name} left Cleaning without a reset after {released}")
                del self.released[name]
        return out


def ledger(cluster: Cluster) -> list[str]:
    """Invariant 6: every live attachment has exactly one open usage record, and every open
    record is a live attachment; every device bound with no attachment has exactly one
    open Reserved record, and every open Reserved record is such a device; the tenant's
    copies say what the ledger says."""
    out: list[str] = []
    vmis = {v.key: v for v in cluster.client.objects(VirtualMachineInstance)}
    records = cluster.records()
    open_records = {
        (r.spec.vmi.uid, r.spec.device) for r in records if r.spec.end is None and r.spec.vmi
    }
    live: set[tuple[str, str]] = set()
    reserved: set[tuple[str, str]] = set()
    for d in cluster.client.objects(GPUDevice):
        att, b = d.status.attachment, d.status.binding
        vmi = vmis.get(att.vmi.key) if att is not None else None
        if att is not None and vmi is not None and vmi.live and vmi.metadata.uid == att.vmi.uid:
            live.add((att.vmi.uid, d.metadata.name))
        if att is None and b is not None:
            reserved.add((b.vm.key, d.metadata.name))
    out += [f"attachment {a} has no open record" for a in sorted(live - open_records)]
    out += [f"record {r} is open with no attachment" for r in sorted(open_records - live)]
    devices = [r.spec.device for r in records if r.spec.end is None]
    out += [f"{d} has two open records" for d in sorted(set(devices)) if devices.count(d) > 1]
    held = [
        (f"{r.spec.namespace}/{r.spec.vm}", r.spec.device)
        for r in cluster.reserved()
        if r.spec.end is None
    ]
    out += [f"reservation {r} has no open Reserved record" for r in sorted(reserved - set(held))]
    out += [
        f"Reserved record {r} is open with no reservation" for r in sorted(set(held) - reserved)
    ]
    out += [f"{r} has two open Reserved records" for r in sorted(set(held)) if held.count(r) > 1]
    copies = {r.metadata.name: r for r in cluster.copies()}
    for r in cluster.ledger():
        c = copies.get(r.metadata.name)
        if c is None or c.spec != r.spec:
            out.append(f"the tenant's copy of {r.metadata.name} says {c and c.spec} not {r.spec}")
    return out


def world_drift(cluster: Cluster) -> list[str]:
    """The binder's cache and indexes agree with the API: no ghost, no double-counted free
    device."""
    out: list[str] = []
    api = {d.metadata.name: d for d in cluster.client.objects(GPUDevice)}
    cached = cluster.world.devices.by_name
    if set(api) != set(cached):
        out.append(f"cache holds {sorted(set(cached) ^ set(api))} unlike the API")
    for name, d in api.items():
        c = cached.get(name)
        if c is not None and c.status != d.status:
            out.append(f"cache status of {name} differs from the API")
    seen: dict[str, int] = {}
    for by_node in cluster.world.devices.free.values():
        for node, names in by_node.items():
            for name in names:
                seen[name] = seen.get(name, 0) + 1
                found = api.get(name)
                if found is None or not is_free(found) or found.spec.node_name != node:
                    out.append(f"{name} is indexed free on {node} but is not")
    out += [f"{name} is indexed free {n} times" for name, n in seen.items() if n > 1]
    missing = {n for n, d in api.items() if is_free(d) and d.status.class_name} - set(seen)
    out += [f"{name} is free but not indexed" for name in sorted(missing)]
    return out


async def kubevirt(cluster: Cluster, seq: list[int]) -> None:
    """KubeVirt and the webhook: a running VM with no VMI asks for its set and starts on it."""
    vms = {v.metadata.name: v for v in cluster.client.objects(VirtualMachine)}
    vmis = {v.metadata.name for v in cluster.client.objects(VirtualMachineInstance)}
    for name, vm in sorted(vms.items()):
        if not vm.running or name in vmis or vm.metadata.deletion_timestamp:
            continue
        seq[0] += 1
        req = cluster.request(name, len(vm.device_names), name=f"{name}-bind-{seq[0]}")
        await cluster.answer_requests()
        answer = cluster.answer(req.metadata.name).status
        await cluster.client.delete(type(req), req.metadata.name, NAMESPACE)
        if answer.phase != RequestPhase.BOUND:
            continue
        assert sorted(answer.devices) == cluster.set_of(name), "answered with another set"
        node = cluster.world.nodes.get(answer.node_name)
        if node is None or not node.ready or node.unschedulable:
            continue  # the scheduler would not place it there; KubeVirt retries later
        cluster.start(name, node=answer.node_name, devices=answer.devices)


async def apply(cluster: Cluster, event: tuple[Any, ...]) -> None:
    kind, *args = event
    c = cluster
    vms = {v.metadata.name for v in c.client.objects(VirtualMachine)}
    vmis = {v.metadata.name: v for v in c.client.objects(VirtualMachineInstance)}
    devices = {d.metadata.name for d in c.client.objects(GPUDevice)}
    if kind == "create" and args[0] not in vms:
        c.vm(args[0], args[1], running=args[2])
    elif kind == "start" and args[0] in vms:
        c.set_running(args[0], True)
    elif kind == "stop" and args[0] in vms:
        c.set_running(args[0], False)
        if args[0] in vmis:
            if vmis[args[0]].live:
                c.finish(args[0])
            await c.remove_vmi(args[0])
    elif kind == "delete" and args[0] in vms:
        await c.delete_vm(args[0])
    elif kind == "vmi_fails" and args[0] in vmis and vmis[args[0]].live:
        c.finish(args[0], phase="Failed")
        await c.remove_vmi(args[0])
    elif kind == "solo" and args[0] not in vmis:
        req = c.request(args[0], args[1], name=f"{args[0]}-bind")
        await c.answer_requests()
        answer = c.answer(req.metadata.name).status
        await c.client.delete(type(req), req.metadata.name, NAMESPACE)
        node = c.world.nodes.get(answer.node_name)
        if answer.phase == RequestPhase.BOUND and node and node.ready and not node.unschedulable:
            c.start(args[0], node=answer.node_name, devices=answer.devices, owned=False)
    elif kind == "annotate" and args[0] in vms:
        c.annotate_vm(args[0], args[1])
    elif kind == "cordon":
        c.cordon(args[0], args[1])
    elif kind == "ready":
        c.set_ready(args[0], args[1])
    elif kind in ("health", "unschedulable", "remove_device"):
        name = f"{args[0]}-0000-{0x10 + args[1]:02x}-00-0"
        if name not in devices:
            return
        if kind == "health":
            c.set_health(name, args[2])
        elif kind == "unschedulable":
            c.set_unschedulable(name, args[2])
        else:
            await c.delete_device(name)
    elif kind == "tick":
        c.clock.advance(minutes=args[0])
    elif kind == "unmanaged" and args[0] in vms and args[0] not in vmis:
        c.set_running(args[0], True)
        c.start(args[0], node=args[1], devices=())  # started past the webhook
    elif kind == "serve":
        c.serve(args[0], range(args[1]))
    elif kind == "restart":
        c.restart()
    elif kind == "reset":
        for d in c.client.objects(GPUDevice):
            if d.status.phase == Phase.CLEANING:
                c.reset(d.metadata.name)


async def quiesce(cluster: Cluster, observer: Observer, limit: int = 25) -> None:
    for _ in range(limit):
        observer.before()
        result = await cluster.run()
        violations = observer.after(result.aborted)
        assert violations == [], violations
        if result.writes == 0 and not result.aborted:
            return
    raise AssertionError("the binder did not reach quiescence")


# The tenants at the start: (GPUs, running) per VM.
tenants = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 3, 4]), st.booleans()),
    min_size=len(VMS),
    max_size=len(VMS),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(classes, tenants, st.lists(events, min_size=1, max_size=30), st.booleans())
# Found by Hypothesis: a running VM deleted and created again, stopped, under its name. The
# new VM's reservation ran out and released the old VM's set, whose VMI still ran.
@example(
    gpu_class=("Pack", "Node", "Reset"),
    initial=[(1, False), (1, False), (1, False), (1, True), (1, False)],
    sequence=[("delete", "vm-3"), ("tick", 6), ("create", "vm-3", 1, False)],
    conflicts=False,
)
@example(
    gpu_class=("Pack", "Node", "Reset"),
    initial=[(1, False), (1, False), (1, False), (1, True), (1, False)],
    sequence=[
        ("delete", "vm-3"),
        ("serve", "node-0", 2),
        ("tick", 1),
        ("tick", 1),
        ("create", "vm-3", 1, False),
    ],
    conflicts=False,
)
def test_invariants_hold_after_any_sequence_of_events(
    gpu_class: tuple[str, str, str],
    initial: list[tuple[int, bool]],
    sequence: list[tuple[Any, ...]],
    conflicts: bool,
) -> None:
    async def scenario() -> None:
        cluster = Cluster()
        policy, topology, cleaning = gpu_class
        cluster.gpu_class(release_after="5m", policy=policy, topology=topology, cleaning=cleaning)
        for node in NODES:
            cluster.node(node, 4)
        for name, (gpus, running) in zip(VMS, initial, strict=True):
            cluster.vm(name, gpus, running=running)
        observer = Observer(cluster, {}, {})
        seq = [0]
        await quiesce(cluster, observer)
        await kubevirt(cluster, seq)
        await quiesce(cluster, observer)
        for i, event in enumerate(sequence):
            await apply(cluster, event)
            if conflicts and i % 3 == 0:
                # A concurrent writer wins the next race for some device.
                victims = sorted(d.metadata.name for d in cluster.client.objects(GPUDevice))
                if victims:
                    cluster.client.conflict_next_write(GPUDevice, victims[i % len(victims)])
            await quiesce(cluster, observer)
            await kubevirt(cluster, seq)
            await quiesce(cluster, observer)
        before = cluster.client.writes
        await cluster.run()
        assert cluster.client.writes == before, "a pass over an unchanged world wrote"

    run(scenario())
