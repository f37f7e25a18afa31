"""`kubectl get` of gpu-binder's kinds answers the first questions: the API server's own
Table (what kubectl prints), from the shipped CRDs' printer columns; and a tenant, who may
not list GPUDevices, sees which GPUs its VMs hold through the VM's devices annotation."""

from __future__ import annotations

import io
import json
import urllib.request
from typing import Any

import pytest
from realcluster import Fleet, eventually, namespace, put, run_vmi, vmi_of

from conftest import StartBinder
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import API_VERSION, DEVICES_ANNOTATION
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient
from gpu_binder.kubectl.command import run

pytestmark = pytest.mark.controlplane

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def table(cp: ControlPlane, path: str) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(column names, priority-0 names, rows as name -> cell) of the server's Table."""
    req = urllib.request.Request(cp.url + path, headers={"Accept": TABLE})
    with urllib.request.urlopen(req, context=cp.ssl_context(), timeout=30) as resp:
        answer = json.loads(resp.read())
    columns = [c["name"] for c in answer["columnDefinitions"]]
    default = [c["name"] for c in answer["columnDefinitions"] if c.get("priority", 0) == 0]
    rows = [dict(zip(columns, r["cells"], strict=True)) for r in answer["rows"]]
    return columns, default, rows


async def test_gpudevices_show_node_class_phase_vm_and_health(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    await fleet.create_vm(ns, "vm", gpus=1)
    (device,) = await eventually(lambda: fleet.set_of(ns, "vm"), what="bound")

    _, default, rows = table(control_plane, f"/apis/{API_VERSION}/gpudevices")
    assert default == ["Name", "Node", "Class", "Phase", "VM", "Health", "Age"]
    (row,) = [r for r in rows if r["Name"] == device.metadata.name]
    assert (row["Node"], row["Class"], row["Phase"]) == (node, fleet.class_name, "Bound")
    assert (row["VM"], row["Health"]) == (f"{ns}/vm", "Healthy")
    free = [r for r in rows if r["Node"] == node and r["Name"] != device.metadata.name]
    assert [(r["Phase"], r["VM"]) for r in free] == [("Available", "")]


async def test_gpuclasses_show_what_is_free_and_the_largest_order_that_fits(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=4)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    await fleet.create_vm(ns, "vm", gpus=1)
    await eventually(lambda: fleet.set_of(ns, "vm"), what="bound")

    async def counted() -> dict[str, Any] | None:
        _, default, rows = table(control_plane, f"/apis/{API_VERSION}/gpuclasses")
        assert default[1:9] == [
            "Resource", "Devices", "Available", "Bound", "Attached", "Lost", "Cleaning",
            "Largest Free Set",
        ]  # fmt: skip
        (row,) = [r for r in rows if r["Name"] == fleet.class_name]
        return row if row["Bound"] == 1 else None

    row = await eventually(counted, what="the class status")
    assert (row["Devices"], row["Available"], row["Largest Free Set"]) == (4, 3, 3)
    assert row["Policy"] == "Pack"  # -o wide (the fleet's classes are Pack)


async def test_usage_records_and_bind_requests_show_what_a_tenant_looks_for(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    vm = await fleet.create_vm(ns, "vm", gpus=1)
    (device,) = await eventually(lambda: fleet.set_of(ns, "vm"), what="bound")
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(1)))
    await run_vmi(admin, vmi, node)

    async def recorded() -> list[dict[str, Any]]:
        return table(control_plane, f"/apis/{API_VERSION}/namespaces/{ns}/gpuusagerecords")[2]

    (row,) = await eventually(recorded, what="a usage record")
    assert (row["VM"], row["Class"], row["Node"]) == ("vm", fleet.class_name, node)
    assert row["Device"] == device.metadata.name and row["Start"] and row["End"] is None
    columns, default, _ = table(control_plane, f"/apis/{API_VERSION}/gpubindrequests")
    assert default == ["Name", "VM", "Phase", "Node", "Message", "Age"]
    assert {"VMI", "Class", "Count"} <= set(columns)


async def test_a_tenant_sees_the_gpus_its_vm_holds_without_reading_gpudevices(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_class()
    node = await fleet.create_node("a")
    ns = namespace(control_plane)
    await start_binder()
    await fleet.create_vm(ns, "vm", gpus=2, running=False)
    held = await eventually(lambda: fleet.whole_set(ns, "vm", 2), what="bound")
    names = ",".join(sorted(d.metadata.name for d in held))

    async def annotated() -> bool:
        vm = await admin.get(VirtualMachine, "vm", ns)
        return vm.metadata.annotations.get(DEVICES_ANNOTATION) == names

    await eventually(annotated, what="the VM annotated")
    tenant = control_plane.add_user(f"tenant-{fleet.id}")
    reader = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "vm-reader", "namespace": ns},
        "rules": [
            {
                "apiGroups": ["kubevirt.io"],
                "resources": ["virtualmachines", "virtualmachineinstances"],
                "verbs": ["get", "list"],
            },
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]},
        ],
    }
    put(control_plane, reader)
    put(
        control_plane,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "vm-reader", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "vm-reader",
            },
            "subjects": [
                {"kind": "User", "name": tenant.name, "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    out, err = io.StringIO(), io.StringIO()
    argv = ["--kubeconfig", str(tenant.kubeconfig), "vm", f"{ns}/vm", "-o", "json"]
    assert await run(argv, out, err) == 0, err.getvalue()
    data = json.loads(out.getvalue())
    assert [d["name"] for d in data["devices"]] == sorted(d.metadata.name for d in held)
    assert data["node"] == node
    assert [e["reason"] for e in data["events"]][:1] == ["GPUOrder"]
