"""Building blocks of the tests against the real control plane: objects, installs, waiting.

Every test makes its own class (its own resourceName and PCI device id), nodes and
namespace, so tests sharing the session's API server never place on each other's GPUs.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUClass, GPUDevice
from gpu_binder.binder.config import Config
from gpu_binder.devcluster import fleet
from gpu_binder.envtest import ControlPlane, User
from gpu_binder.kube import connect
from gpu_binder.kube.client import KubeClient
from gpu_binder.kube.leaderelection import Timings
from gpu_binder.kube.manager import Manager, Options, WebhookOptions
from gpu_binder.sim import builders

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BINDER_SA = (
    "system:serviceaccount:gpu-binder:gpu-binder",
    ("system:serviceaccounts", "system:serviceaccounts:gpu-binder", "system:authenticated"),
)
PATHS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Service": "/api/v1/namespaces/{ns}/services",
    "ResourceQuota": "/api/v1/namespaces/{ns}/resourcequotas",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
}

X = TypeVar("X")


def uid() -> str:
    return uuid.uuid4().hex[:8]


def put(cp: ControlPlane, doc: dict[str, Any]) -> dict[str, Any]:
    """Create, or replace what an earlier test or session left."""
    path = PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
    created = cp.request("POST", path, doc)
    if created.status == 409:
        name = doc["metadata"]["name"]
        current = cp.request("GET", f"{path}/{name}").json()
        meta = {**doc["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        created = cp.request("PUT", f"{path}/{name}", {**doc, "metadata": meta})
    assert created.ok, created.body
    result: dict[str, Any] = created.json()
    return result


def install(cp: ControlPlane, file: Path) -> list[dict[str, Any]]:
    return [put(cp, doc) for doc in yaml.safe_load_all(file.read_text()) if doc]


def namespace(cp: ControlPlane, prefix: str = "t") -> str:
    name = f"{prefix}-{uid()}"
    put(cp, {"kind": "Namespace", "metadata": {"name": name}})
    return name


# KubeVirt's kubevirt.io:edit ClusterRole, aggregated into `edit`, as far as tenants' VMs and
# VMIs go (pkg/virt-operator/resource/generate/rbac/cluster.go, newEditClusterRole): the test
# control plane runs no virt-operator to install it.
KUBEVIRT_EDIT = {
    "kind": "ClusterRole",
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "metadata": {"name": "test-kubevirt-edit"},
    "rules": [
        {
            "apiGroups": ["kubevirt.io"],
            "resources": ["virtualmachines", "virtualmachineinstances"],
            "verbs": ["get", "delete", "create", "update", "patch", "list", "watch"],
        }
    ],
}


def tenant(cp: ControlPlane, ns: str, name: str | None = None) -> User:
    """A hostile tenant of issue 11: admin of its namespace as KubeVirt's `edit` role
    (VMs and VMIs, whose status it may write: VMIs have no status subresource) and
    `gpu-binder-tenant` make it; nothing more."""
    user = cp.add_user(name or f"tenant-{uid()}", ["tenants"])
    put(cp, KUBEVIRT_EDIT)
    for role in ("edit", "gpu-binder-tenant", KUBEVIRT_EDIT["metadata"]["name"]):
        put(
            cp,
            {
                "kind": "RoleBinding",
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "metadata": {"name": f"{role}-{user.name}"[:63], "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"kind": "User", "name": user.name, "apiGroup": "rbac.authorization.k8s.io"}
                ],
            },
        )
    return user


async def eventually(
    probe: Callable[[], Awaitable[X | None]], timeout: float = 15.0, what: str = "condition"
) -> X:
    """The first truthy result of probe, polled; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    last: X | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout:g}s (last: {last!r})")


# Device ids for the session's fleets, above the real GPUs' ids the other tests use.
_DEVICE_IDS = itertools.count(0xA000)


class Fleet:
    """One test's GPU class, nodes and devices, created through the admin client."""

    def __init__(self, admin: KubeClient, gpus_per_node: int = 4) -> None:
        self.admin = admin
        self.id = uid()
        # A device id of this test alone, so other tests' classes never match its GPUs:
        # counted, not drawn, since four random hex digits collide within a session.
        self.device_id = f"0x{next(_DEVICE_IDS):04x}"
        self.class_name = f"gpu-{self.id}"
        self.resource = f"example.com/GPU_{self.id}"
        self.gpus_per_node = gpus_per_node

    def slot(self, n: int) -> str:
        return builders.slot_resource(n, self.device_id)

    async def create_class(self, **spec: Any) -> GPUClass:
        cls = fleet.gpu_class(self.class_name, self.resource, self.device_id, **spec)
        return await self.admin.create(cls)

    async def create_node(self, suffix: str, ready: bool = True) -> str:
        name = f"n-{self.id}-{suffix}"
        devices = await fleet.create_node(
            self.admin,
            name,
            self.gpus_per_node,
            self.device_id,
            ready=ready,
            first_bus=builders.FIRST_BUS,
            model="test GPU",
            numa_node=None,
            driver="",
        )
        for create in devices:
            await create
        return name

    async def set_node(self, name: str, ready: bool) -> None:
        status = fleet.node_status(self.gpus_per_node, ready, self.device_id)
        await self.admin.patch_status(Node, name, "", {"status": status})

    async def devices(self) -> list[GPUDevice]:
        items = (await self.admin.list(GPUDevice)).items
        return [d for d in items if d.spec.device_id == self.device_id]

    async def set_of(self, namespace: str, vm: str) -> list[GPUDevice]:
        return [
            d
            for d in await self.devices()
            if d.status.binding is not None
            and d.status.binding.vm.namespace == namespace
            and d.status.binding.vm.name == vm
        ]

    async def whole_set(self, namespace: str, vm: str, count: int) -> list[GPUDevice]:
        """The VM's set once all count devices are bound, else []: a set's binds are
        written in parallel, so a reader can see some of them before the rest."""
        devices = await self.set_of(namespace, vm)
        return devices if len(devices) == count else []

    def gpus(self, count: int) -> list[str]:
        """The device names of count GPU entries ordering this test's class."""
        return [self.resource] * count

    async def create_vm(
        self, namespace: str, name: str, gpus: int, running: bool = True
    ) -> VirtualMachine:
        strategy = "Always" if running else "Halted"
        vm = builders.vm_object(name, namespace, self.gpus(gpus), run_strategy=strategy)
        return await self.admin.create(vm)


def vmi_of(
    vm: VirtualMachine | None,
    namespace: str,
    name: str,
    gpus: list[str],
    affinity: dict[str, Any] | None = None,
) -> VirtualMachineInstance:
    """The VMI KubeVirt's VM controller would create for vm (or a standalone one)."""
    spec = {} if affinity is None else {"affinity": affinity}
    return VirtualMachineInstance.from_dict(
        builders.vmi_object(name, namespace, gpus, owner=vm, **spec)
    )


async def run_vmi(admin: KubeClient, vmi: VirtualMachineInstance, node: str) -> None:
    """What virt-handler reports once the VMI runs on node (VMIs have no status subresource)."""
    status = {"phase": "Running", "nodeName": node}
    await admin.patch(
        VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace, {"status": status}
    )


async def end_vmi(
    admin: KubeClient, vmi: VirtualMachineInstance, node_clock_ahead: float = 0.0
) -> None:
    """virt-handler reports the VMI Succeeded, stamped by its node's clock (that many
    seconds ahead of the true time; negative: behind)."""
    ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + node_clock_ahead))
    status = {
        "phase": "Succeeded",
        "phaseTransitionTimestamps": [{"phase": "Succeeded", "phaseTransitionTimestamp": ended}],
    }
    await admin.patch(
        VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace, {"status": status}
    )


# --- gpu-binder against the control plane ---------------------------------------------


@dataclass(frozen=True)
class BinderSetup:
    cp: ControlPlane
    webhook_port: int
    cert_file: Path
    key_file: Path


StartBinder = Callable[..., Awaitable[Manager]]


class Binders:
    """start_binder(config=Config(...)): a running binder with its webhook; stopped after
    the test, or before by stop(manager) (an outage: no binder and no webhook)."""

    def __init__(self, setup: BinderSetup) -> None:
        self.setup = setup
        self.running: list[tuple[Manager, asyncio.Event, asyncio.Task[None], KubeClient]] = []

    async def __call__(
        self, config: Config | None = None, client: KubeClient | None = None
    ) -> Manager:
        setup = self.setup
        if client is None:
            client = await connect(str(setup.cp.kubeconfig), impersonate=BINDER_SA)
        options = Options(
            identity=f"test-{uid()}",
            lease_name=f"gpu-binder-{uid()}",
            timings=Timings(4.0, 3.0, 0.5),
            # Only the API server is served: the certificate it presents to webhooks.
            webhook=WebhookOptions(
                setup.cert_file,
                setup.key_file,
                host="127.0.0.1",
                port=setup.webhook_port,
                client_ca_file=setup.cp.webhook_client.ca_file,
                client_names=(setup.cp.webhook_client.name,),
            ),
            metrics_port=None,
        )
        manager = Manager(client, config or Config(resync=timedelta(seconds=1)), options)
        stop = asyncio.Event()
        task = asyncio.create_task(manager.run(stop))
        self.running.append((manager, stop, task, client))
        async with asyncio.timeout(20):
            while not (manager.ready and manager.controller.passes):
                if task.done():
                    task.result()
                await asyncio.sleep(0.02)
        return manager

    async def stop(self, manager: Manager | None = None) -> None:
        """Stop one binder (its webhook too), or every one."""
        keep = []
        for entry in self.running:
            running, stop, task, client = entry
            if manager is not None and running is not manager:
                keep.append(entry)
                continue
            stop.set()
            await task
            await client.close()
        self.running = keep
