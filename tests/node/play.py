"""What the tests of the real-node tier do through the API: KubeVirt's part (VMs, VMIs and
their launcher pods, played by the tests as KubeVirt's controllers would), and reading
back what the binder, the scheduler and the kubelet did."""

from __future__ import annotations

import time
from typing import Any

from launcher import on_test_node, render_launcher_pod
from nodecluster import create, delete, get, merge_patch, wait_for

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.envtest import ControlPlane
from gpu_binder.sim import builders

DEVICES = "/apis/gpu.cozystack.io/v1alpha1/gpudevices"
KUBEVIRT = "/apis/kubevirt.io/v1/namespaces/{ns}"
# The compute container prints the variables KubeVirt reads its PCI devices from, then
# holds its GPUs as QEMU would, until the pod is deleted. Read from its own environ (it is
# PID 1 of its container): a shell passes no variable with a dash in its name, as slot
# resources' have, to its children.
PRINT_PCI = (
    "tr '\\0' '\\n' < /proc/1/environ | grep ^PCI_RESOURCE_ | sort; echo done; exec sleep 86400"
)


def namespace(cp: ControlPlane, name: str) -> str:
    create(cp, "/api/v1/namespaces", {"metadata": {"name": name}})
    return name


def vm(cp: ControlPlane, ns: str, name: str, gpus: int, resource: str) -> dict[str, Any]:
    obj = builders.vm_object(name, ns, [resource] * gpus, run_strategy="Always")
    return create(cp, f"{KUBEVIRT.format(ns=ns)}/virtualmachines", obj.to_dict())


def set_run_strategy(cp: ControlPlane, ns: str, name: str, strategy: str) -> None:
    path = f"{KUBEVIRT.format(ns=ns)}/virtualmachines/{name}"
    merge_patch(cp, path, {"spec": {"runStrategy": strategy}})


def devices(cp: ControlPlane) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (get(cp, DEVICES) or {}).get("items") or []
    return items


def bound_set(cp: ControlPlane, ns: str, name: str) -> dict[str, str]:
    """PCI address -> GPUDevice name of the GPUs bound to the VM ns/name."""
    out = {}
    for d in devices(cp):
        vm = ((d.get("status") or {}).get("binding") or {}).get("vm") or {}
        if (vm.get("namespace"), vm.get("name")) == (ns, name):
            out[d["spec"]["pciAddress"]] = d["metadata"]["name"]
    return out


def set_node(cp: ControlPlane, ns: str, name: str) -> str:
    """The one node the GPUs bound to the VM ns/name are on."""
    nodes = set()
    for d in devices(cp):
        vm = ((d.get("status") or {}).get("binding") or {}).get("vm") or {}
        if (vm.get("namespace"), vm.get("name")) == (ns, name):
            nodes.add(d["spec"]["nodeName"])
    [node] = nodes
    return node


def wait_bound(
    cp: ControlPlane, ns: str, name: str, gpus: int, timeout: float = 30
) -> dict[str, str]:
    return wait_for(
        lambda: (s := bound_set(cp, ns, name)) and len(s) == gpus and s,
        timeout,
        f"{gpus} GPUs bound to {ns}/{name}",
    )


def start_vmi(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """The VMI KubeVirt's VM controller creates for the VM (through the webhook)."""
    raw = get(cp, f"{KUBEVIRT.format(ns=ns)}/virtualmachines/{name}")
    assert raw is not None
    vmi = builders.vmi_for(VirtualMachine.from_dict(raw))
    return create(cp, f"{KUBEVIRT.format(ns=ns)}/virtualmachineinstances", vmi)


def launch(cp: ControlPlane, vmi: dict[str, Any]) -> dict[str, Any]:
    """virt-controller's launcher pod for the admitted VMI, runnable on the test node."""
    pod = on_test_node(render_launcher_pod(vmi), PRINT_PCI)
    return create(cp, f"/api/v1/namespaces/{vmi['metadata']['namespace']}/pods", pod)


def pod_path(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


def wait_running(cp: ControlPlane, pod: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        now = get(cp, pod_path(pod))
        phase = ((now or {}).get("status") or {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            raise AssertionError(f"pod ended {phase}: {now}")
        return now if phase == "Running" else None

    return wait_for(running, timeout, f"pod {pod['metadata']['name']} Running")


def pci_env(cp: ControlPlane, pod: dict[str, Any], timeout: float = 30) -> dict[str, str]:
    """The PCI_RESOURCE_* variables the running container has, read from its log."""

    def logged() -> str | None:
        resp = cp.request("GET", pod_path(pod) + "/log?container=compute")
        text = resp.body.decode() if resp.ok else ""
        return text if "done" in text.splitlines() else None

    text = wait_for(logged, timeout, "the container's log")
    return dict(
        line.split("=", 1) for line in text.splitlines() if line.startswith("PCI_RESOURCE_")
    )


def addresses(env: dict[str, str]) -> list[str]:
    return sorted(a for v in env.values() for a in v.split(",") if a)


def report_running(cp: ControlPlane, vmi: dict[str, Any], node: str) -> None:
    """What virt-handler reports once the VMI runs on node."""
    meta = vmi["metadata"]
    path = f"{KUBEVIRT.format(ns=meta['namespace'])}/virtualmachineinstances/{meta['name']}"
    merge_patch(cp, path, {"status": {"phase": "Running", "nodeName": node}})


def vmi_path(vmi: dict[str, Any]) -> str:
    meta = vmi["metadata"]
    return f"{KUBEVIRT.format(ns=meta['namespace'])}/virtualmachineinstances/{meta['name']}"


def finished(cp: ControlPlane, vmi: dict[str, Any]) -> None:
    """virt-handler's report that the guest shut down."""
    ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "phase": "Succeeded",
        "phaseTransitionTimestamps": [{"phase": "Succeeded", "phaseTransitionTimestamp": ended}],
    }
    merge_patch(cp, vmi_path(vmi), {"status": status})


def stop_vmi(cp: ControlPlane, vmi: dict[str, Any], pod: dict[str, Any]) -> None:
    """KubeVirt's stop: the guest shuts down (Succeeded), the launcher pod goes, then the
    VMI (its usage finalizer is the binder's to remove)."""
    path = vmi_path(vmi)
    finished(cp, vmi)
    delete(cp, pod_path(pod))
    wait_for(lambda: get(cp, pod_path(pod)) is None, 30, "launcher pod gone")
    delete(cp, path)
    wait_for(lambda: get(cp, path) is None, 30, "VMI gone (usage finalizer removed)")
