"""Faults on the real control plane (issue 12, item 4): components restarted or killed
while VMs start; afterwards no GPU is bound twice, no VM holds other than its order, every
start was answered (admitted, or refused in words and admitted when tried again, as
KubeVirt's VM controller retries), and every started VM's GPUs have open usage records.

Each test leaves the session's cluster whole again (node Ready, slots served, a leader)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from launcher import render_launcher_pod
from nodecluster import (
    BinderProcess,
    KwokNodes,
    NodeTier,
    create,
    delete,
    get,
    merge_patch,
    request,
    wait_for,
)
from play import KUBEVIRT, devices, namespace, report_running, vm, vmi_path
from realcluster import uid

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.devcluster import fleet
from gpu_binder.sim import builders

MERGE = "application/merge-patch+json"
SUCCEEDED = {"phase": "Succeeded"}
RECORDS = "/apis/gpu.cozystack.io/v1alpha1/namespaces/{ns}/gpuusagerecords"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def sets(cp: Any, ns: str) -> dict[str, list[str]]:
    """VM name -> the GPUDevices bound to it, for the VMs of ns."""
    out: dict[str, list[str]] = {}
    for d in devices(cp):
        b = (d.get("status") or {}).get("binding") or {}
        if (b.get("vm") or {}).get("namespace") == ns:
            out.setdefault(b["vm"]["name"], []).append(d["metadata"]["name"])
    return out


def assert_whole(cp: Any, ns: str, order: dict[str, int]) -> None:
    """Every VM holds exactly its order, and no GPU is in two sets."""
    held = sets(cp, ns)
    assert {vm: len(gpus) for vm, gpus in held.items()} == order
    every = [g for gpus in held.values() for g in gpus]
    assert len(every) == len(set(every))


def start(cp: Any, ns: str, name: str, refusals: list[str], timeout: float = 90) -> dict[str, Any]:
    """Create the VM's VMI as KubeVirt's VM controller does, again after each refusal."""
    raw = get(cp, f"{KUBEVIRT.format(ns=ns)}/virtualmachines/{name}")
    assert raw is not None
    vmi = builders.vmi_for(VirtualMachine.from_dict(raw))
    deadline = time.monotonic() + timeout
    while True:
        resp = cp.request("POST", f"{KUBEVIRT.format(ns=ns)}/virtualmachineinstances", vmi)
        if resp.ok:
            created: dict[str, Any] = resp.json()
            return created
        try:
            message = resp.json().get("message", "")
        except ValueError:
            message = ""
        # Answered: a refusal says why (a dead webhook's or apiserver's error says so too).
        assert message, f"VMI {ns}/{name} refused without words: HTTP {resp.status}"
        refusals.append(message)
        assert time.monotonic() < deadline, f"VMI {ns}/{name} never admitted: {refusals[-3:]}"
        time.sleep(1.0)


def cleanup(cp: Any, ns: str) -> None:
    """Delete the namespace and wait until it and its GPUs' bindings are gone, playing
    virt-handler for its VMIs (finished once deleted), so the next test starts clean."""
    delete(cp, f"/api/v1/namespaces/{ns}")
    deadline = time.monotonic() + 90
    while get(cp, f"/api/v1/namespaces/{ns}") is not None:
        for vmi in (get(cp, f"{KUBEVIRT.format(ns=ns)}/virtualmachineinstances") or {}).get(
            "items"
        ) or []:
            status = vmi.get("status") or {}
            if vmi["metadata"].get("deletionTimestamp") and status.get("phase") != "Succeeded":
                # It may go between the list and the patch.
                request(cp, "PATCH", vmi_path(vmi), {"status": SUCCEEDED}, content_type=MERGE)
        assert time.monotonic() < deadline, f"namespace {ns} not gone"
        time.sleep(0.5)
    wait_for(lambda: not sets(cp, ns), 60, f"the GPUs of {ns} released")


def wait_whole(tier: NodeTier, ns: str, order: dict[str, int]) -> None:
    """Until every VM holds its whole order (a set is written one GPUDevice at a time)."""
    cp = tier.cp
    try:
        wait_for(
            lambda: {vm: len(g) for vm, g in sets(cp, ns).items()} == order, 90, "every VM bound"
        )
    except AssertionError:
        phases = Counter((d.get("status") or {}).get("phase") for d in devices(cp))
        listed = (get(cp, f"{KUBEVIRT.format(ns=ns)}/virtualmachines") or {}).get("items") or []
        vms = sorted(v["metadata"]["name"] for v in listed)
        raise AssertionError(
            f"sets {sets(cp, ns)}; VMs in the API {vms}; device phases {dict(phases)}\n"
            f"{tier.binder.log()[-2500:]}"
        ) from None


def test_the_kubelet_restarted_gets_its_slots_back_from_the_agent(tier: NodeTier) -> None:
    registrations = tier.served_slots()
    tier.node.restart_kubelet()
    tier.node.wait_ready(60)
    # The kubelet forgot its plugins; the agent's watchdog serves and registers again.
    wait_for(lambda: tier.served_slots() == registrations, 60, "slots served again")


def test_the_agent_killed_and_restarted_serves_the_same_slots(tier: NodeTier) -> None:
    before = {d["metadata"]["name"]: d["spec"].get("slot") for d in devices(tier.cp)}
    tier.agent.kill()
    # The kubelet marks a vanished plugin's devices unhealthy (allocatable 0) ...
    wait_for(lambda: not tier.served_slots(), 60, "slots gone with the agent")
    tier.agent.start()
    wait_for(lambda: len(tier.served_slots()) == 8, 60, "slots back")
    after = {d["metadata"]["name"]: d["spec"].get("slot") for d in devices(tier.cp)}
    assert after == before


def _burst(tier: NodeTier, kwok: KwokNodes, ns: str, vms: int) -> dict[str, int]:
    for i in range(vms):
        vm(tier.cp, ns, f"vm-{i}", 2, kwok.resource)
    return {f"vm-{i}": 2 for i in range(vms)}


def _point_webhook(cp: Any, port: int) -> None:
    config = fleet.webhook_configuration(f"https://127.0.0.1:{port}", cp.ca_pem)
    name = config["metadata"]["name"]
    current = get(cp, f"{WEBHOOKS}/{name}")
    assert current is not None
    merge_patch(cp, f"{WEBHOOKS}/{name}", {"webhooks": config["webhooks"]})


def test_the_leader_killed_during_a_burst_loses_no_start_and_no_usage_record(
    tier: NodeTier, kwok: KwokNodes
) -> None:
    cp = tier.cp
    ns = namespace(cp, f"failover-{uid()}")
    # A second replica, standing by; the webhook calls it (as a Service could).
    standby_hook = tier.webhook.__class__(0, tier.webhook.cert_file, tier.webhook.key_file)
    from gpu_binder.envtest import free_port

    standby_hook.port = free_port()
    standby = BinderProcess(cp, tier.work, standby_hook).start()
    try:
        time.sleep(2.0)
        _point_webhook(cp, standby_hook.port)
        time.sleep(2.0)
        order = _burst(tier, kwok, ns, 6)
        refusals: list[str] = []
        vmis = []
        for i, name in enumerate(order):
            if i == 2:
                tier.binder.kill()  # the leader: no lease released, nothing finished
            vmis.append(start(cp, ns, name, refusals))
        pods = [create(cp, f"/api/v1/namespaces/{ns}/pods", render_launcher_pod(v)) for v in vmis]
        for v, p in zip(vmis, pods, strict=True):
            path = f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
            try:
                node = wait_for(
                    lambda path=path: (get(cp, path) or {}).get("spec", {}).get("nodeName"), 60
                )
            except AssertionError:
                now = get(cp, path) or {}
                why = [c for c in (now.get("status") or {}).get("conditions") or []]
                asked = now["spec"]["containers"][0]["resources"]
                raise AssertionError(
                    f"{path} not scheduled: {why}; asks {asked}; sets {sets(cp, ns)}; "
                    f"affinity {now['spec'].get('affinity')}; refusals {refusals}"
                ) from None
            report_running(cp, v, node)
        wait_whole(tier, ns, order)
        assert_whole(cp, ns, order)
        held = sets(cp, ns)

        def records() -> Counter[str]:
            items = (get(cp, RECORDS.format(ns=ns)) or {}).get("items") or []
            return Counter(r["spec"]["vm"] for r in items if not r["spec"].get("end"))

        try:
            wait_for(lambda: records() == Counter(dict.fromkeys(order, 2)), 60, "records")
        except AssertionError:
            raise AssertionError(f"open records {records()}; {refusals}") from None
        for r in (get(cp, RECORDS.format(ns=ns)) or {}).get("items") or []:
            assert r["spec"]["device"] in held[r["spec"]["vm"]]
    finally:
        # The session's binder back, the webhook pointing at it again.
        tier.binder.start()
        _point_webhook(cp, tier.webhook.port)
        standby.stop()
        cleanup(cp, ns)


# The restarts last: what they disturb is put right by their cleanup, but less is lost
# to a later test if something stays behind.


def test_apiserver_restarted_mid_pass_binds_every_vm_once(tier: NodeTier, kwok: KwokNodes) -> None:
    cp = tier.cp
    ns = namespace(cp, f"fault-{uid()}")
    try:
        order = _burst(tier, kwok, ns, 4)
        cp.restart_apiserver(down=2.0)
        wait_whole(tier, ns, order)
        assert_whole(cp, ns, order)
    finally:
        tier.node.wait_ready(60)
        cleanup(cp, ns)


def test_etcd_restarted_mid_pass_binds_every_vm_once(tier: NodeTier, kwok: KwokNodes) -> None:
    cp = tier.cp
    ns = namespace(cp, f"fault-{uid()}")
    try:
        order = _burst(tier, kwok, ns, 4)
        cp.restart_etcd(down=2.0)
        wait_whole(tier, ns, order)
        assert_whole(cp, ns, order)
    finally:
        tier.node.wait_ready(60)
        cleanup(cp, ns)
