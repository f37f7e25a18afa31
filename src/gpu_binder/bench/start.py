"""`gpu-binder bench start`: a burst of VM starts at cluster scale, with the real scheduler.

A local control plane with kube-scheduler and kube-controller-manager, KWOK playing NODES
nodes of GPUS GPUs each (allocatable: one unit of each slot resource, as the agent's
device plugin serves them, and GPUS units of the class's resource, as a count-based
device plugin would), and gpu-binder (`gpu-binder run`, as its ServiceAccount, webhook
over TLS) settled on their GPUDevices. Then, side by side in one run:

- baseline: VMS plain pods asking the class's resource by count, all at once, no
  gpu-binder in their path: pod create → scheduled;
- KubeVirt alone: the same VMs, VMIs and launcher pods (below) before gpu-binder runs,
  their GPUs asked by count as KubeVirt's own device plugins serve them, no webhook in
  their path: what KubeVirt's flow costs by itself, which no placement controller in it
  can undo. Deleted again before gpu-binder starts;
- gpu-binder: VMS VMs of PER_VM GPUs, all at once, each followed by its VMI as KubeVirt's
  VM controller creates it (through the webhook, which waits for the binder's bind; a
  refused VMI is created again as the VM controller's rate-limited queue retries it,
  bench.kubevirt), then its
  launcher pod as virt-controller renders it (through the pod webhook), and once the pod
  is scheduled its VMI reported Scheduled on that node and Running (bench.kubevirt plays
  KubeVirt's controllers): VMI create → admitted, pod create → scheduled, and whether
  every pod landed on the node of its VM's set.

Starts per second: pods scheduled over the time from the burst's first create to its
last scheduling. The ratio gpu-binder / baseline is the figure; KubeVirt alone / baseline
is the most any controller in KubeVirt's path could reach on the same API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_binder.api.pod import Pod
from gpu_binder.api.types import GPUDevice
from gpu_binder.bench import apicalls, cpu, histograms, kubevirt, ledger
from gpu_binder.binder import Config
from gpu_binder.client.errors import ApiError
from gpu_binder.devcluster import fleet
from gpu_binder.devcluster.kwoknodes import SCHEDULABLE, seed_kwok
from gpu_binder.envtest import ControlPlane, free_port
from gpu_binder.envtest.components import CONTROLLER_MANAGER, SCHEDULER
from gpu_binder.envtest.kwok import start_kwok
from gpu_binder.envtest.process import Process
from gpu_binder.kube import KubeClient, load
from gpu_binder.sim import builders

NAMESPACE = "bench"
BINDER_SA = "system:serviceaccount:gpu-binder:gpu-binder"
BINDER_GROUPS = "system:serviceaccounts,system:serviceaccounts:gpu-binder,system:authenticated"
KUBEVIRT = f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
# How long the burst's last pods may stay pending before they are counted as not scheduled.
PENDING_TIMEOUT = 300.0
# How long a deletion's VMIs and pods may take to go (the binder closes records first).
DELETE_TIMEOUT = 120.0


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ms(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"samples": 0}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 1),
        "p99_ms": round(p99 * 1e3, 1),
        "max_ms": round(ordered[-1] * 1e3, 1),
        "samples": len(ordered),
    }


@dataclass
class Scheduled:
    """When each pod of the namespace was first seen with a node (a watch), and where; the
    VMI of each launcher pod is then reported Scheduled and Running, as KubeVirt would."""

    at: dict[str, float] = field(default_factory=dict)
    node: dict[str, str] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    reports: set[asyncio.Task[None]] = field(default_factory=set)
    # The virt-controller of the burst running now, whose VMI controller reports.
    controller: kubevirt.VirtController = field(default_factory=kubevirt.VirtController)

    async def watch(self, client: KubeClient) -> None:
        rv = (await client.list(Pod, NAMESPACE)).resource_version
        while True:
            try:
                async for event in client.watch(Pod, NAMESPACE, rv):
                    pod = event.object
                    rv = pod.metadata.resource_version or rv
                    if not isinstance(pod, Pod):  # a bookmark: only where the watch stands
                        continue
                    name = pod.metadata.name
                    if pod.node_name and name not in self.at:
                        self.at[name] = time.perf_counter()
                        self.node[name] = pod.node_name
                        self.changed.set()
                        if pod.vmi_uid:
                            report = asyncio.create_task(self._report(client, pod))
                            self.reports.add(report)
                            report.add_done_callback(self.reports.discard)
            except ApiError:
                rv = (await client.list(Pod, NAMESPACE)).resource_version

    def _report(self, client: KubeClient, pod: Pod) -> Coroutine[Any, Any, None]:
        return kubevirt.report_scheduled(client, pod, self.controller)

    async def until(self, names: set[str], timeout: float) -> set[str]:
        """Wait until all names are scheduled or timeout; the ones that were not."""
        deadline = time.perf_counter() + timeout
        while not names <= set(self.at):
            left = deadline - time.perf_counter()
            if left <= 0:
                return names - set(self.at)
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        return set()


async def _why_pending(client: KubeClient, names: set[str]) -> list[str]:
    """The scheduler's words for a few pending pods (their PodScheduled condition)."""
    out = []
    for name in sorted(names)[:200]:
        pod = await client.request("GET", f"{PODS}/{name}")
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") != "True":
                out.append(str(c.get("message", ""))[:300])
    return sorted(set(out))[:3]


def _throughput(first: float, done: list[float]) -> float:
    return round(len(done) / max(1e-9, max(done) - first), 1) if done else 0.0


class Bench:
    def __init__(
        self,
        cp: ControlPlane,
        work: Path,
        nodes: int,
        gpus: int,
        vms: int,
        per_vm: int,
        gc_freeze_interval: str | None = None,
        threads: tuple[int, int] = (
            kubevirt.VM_CONTROLLER_THREADS,
            kubevirt.VMI_CONTROLLER_THREADS,
        ),
    ) -> None:
        self.cp = cp
        self.threads = threads  # virt-controller's VM and VMI controller threads
        self.work = work
        self.nodes = nodes
        self.gpus = gpus
        self.vms = vms
        self.per_vm = per_vm
        self.gc_freeze_interval = gc_freeze_interval
        self.metrics_url = ""
        self.running: dict[str, Process] = {}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of every process of the bench (bench.cpu)."""
        pids = {name: p.pid for name, p in (self.cp.processes() | self.running).items()}
        return cpu.account(pids | {cpu.BENCH: os.getpid()})

    async def run(self, kwok: Path) -> dict[str, Any]:
        client = KubeClient(await load(str(self.cp.kubeconfig)), pool=256, timeout=60)
        kwok_proc = self.running["kwok"] = start_kwok(kwok, self.work, self.cp.kubeconfig)
        binder: Process | None = None
        try:
            await self.seed(client)
            await apicalls.quiet(self.cp)
            scheduled = Scheduled()
            watch = asyncio.create_task(scheduled.watch(client))
            try:
                t, c = await apicalls.served(self.cp), self.cpu()
                alone = await self.burst(client, scheduled, "kv")
                alone["api_requests_per_start"] = apicalls.per_start(
                    t, await apicalls.served(self.cp), self.vms
                )
                alone["cpu_ms_per_start"] = cpu.per_start(c, self.cpu(), self.vms)
                say(f"KubeVirt alone: {alone}")
                await self.delete_vms(client)
                binder = self.running["gpu-binder"] = self.start_binder(client)
                await self.settled(client, binder)
                t0, c0 = await apicalls.served(self.cp), self.cpu()
                baseline = await self._baseline(client, scheduled)
                t1, c1 = await apicalls.served(self.cp), self.cpu()
                baseline["api_requests_per_start"] = apicalls.per_start(t0, t1, self.vms)
                baseline["cpu_ms_per_start"] = cpu.per_start(c0, c1, self.vms)
                say(f"baseline: {baseline}")
                metrics = await histograms.scrape(self.metrics_url)
                ours = await self.burst(client, scheduled, "vm")
                t2 = await apicalls.served(self.cp)
                ours["cpu_ms_per_start"] = cpu.per_start(c1, self.cpu(), self.vms)
                ours["api_requests_per_start"] = apicalls.per_start(t1, t2, self.vms)
                ours["webhook_calls"] = apicalls.webhook_calls(t1, t2)
                ours |= histograms.both(metrics, await histograms.scrape(self.metrics_url))
                ours["ledger"] = await ledger.unrecorded(
                    client, NAMESPACE, Config().ledger_namespace
                )
                say(f"gpu-binder: {ours}")
            finally:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
        finally:
            if binder is not None:
                binder.stop()
            kwok_proc.stop()
            await client.close()

        def ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
            return round(float(a["starts_per_s"]) / max(1e-9, float(b["starts_per_s"])), 2)

        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus,
            "vms": self.vms,
            "gpus_per_vm": self.per_vm,
            "baseline": baseline,
            "kubevirt_alone": alone,
            "gpu_binder": ours,
            "throughput_ratio": ratio(ours, baseline),
            "kubevirt_alone_ratio": ratio(alone, baseline),
            "gpu_binder_to_kubevirt_alone": ratio(ours, alone),
        }

    async def seed(self, client: KubeClient) -> None:
        t = time.perf_counter()
        await client.create(fleet.gpu_class(cleaning="None"))
        names = [f"kwok-{i:04d}" for i in range(self.nodes)]
        devices = await seed_kwok(
            client, names, self.gpus, fleet.DEVICE_ID, class_resource=fleet.RESOURCE
        )
        await client.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        say(f"seeded {self.nodes} KWOK nodes, {devices} GPUs in {time.perf_counter() - t:.1f}s")

    def start_binder(self, client: KubeClient) -> Process:
        port, metrics = free_port(), free_port()
        cert, key = self.cp.certs.ca.issue_serving("gpu-binder").write(self.work, "webhook")
        proc = Process("gpu-binder", self.work / "logs" / "gpu-binder.log")
        freeze = (
            [f"--gc-freeze-interval={self.gc_freeze_interval}"]
            if self.gc_freeze_interval is not None
            else []
        )
        proc.start(
            [
                sys.executable,
                "-m",
                "gpu_binder.cli.main",
                "run",
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--as={BINDER_SA}",
                f"--as-group={BINDER_GROUPS}",
                "--leader-elect=false",
                "--webhook-host=127.0.0.1",
                f"--webhook-port={port}",
                f"--tls-cert-file={cert}",
                f"--tls-key-file={key}",
                "--metrics-host=127.0.0.1",
                f"--metrics-port={metrics}",
                "--log-level=warning",
                "--log-format=text",
                *freeze,
            ]
        )
        self._webhook_url = f"https://127.0.0.1:{port}"
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        return proc

    async def settled(self, client: KubeClient, binder: Process) -> None:
        """Until the binder has classified every GPU (status.className), then the webhook."""
        t = time.perf_counter()
        total = self.nodes * self.gpus
        while True:
            if (rc := binder.exited()) is not None:
                raise RuntimeError(f"gpu-binder exited {rc} before it settled:\n{binder.tail()}")
            devices = (await client.list(GPUDevice)).items
            if sum(1 for d in devices if d.status.class_name) >= total:
                break
            await asyncio.sleep(1.0)
        config = fleet.webhook_configuration(self._webhook_url, self.cp.ca_pem)
        await fleet.put_webhook_configuration(client, config)
        await asyncio.sleep(2.0)  # the apiserver's webhook configuration informer
        say(f"binder settled on {total} GPUs in {time.perf_counter() - t:.1f}s")

    async def _baseline(self, client: KubeClient, scheduled: Scheduled) -> dict[str, Any]:
        """Plain pods asking the class's resource by count: the scheduler alone."""
        names = [f"plain-{i:04d}" for i in range(self.vms)]
        created: dict[str, float] = {}

        async def one(name: str) -> None:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "nodeSelector": {SCHEDULABLE: "true"},
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "compute",
                            "image": "virt-launcher",
                            "resources": {"limits": {fleet.RESOURCE: str(self.per_vm)}},
                        }
                    ],
                },
            }
            t = time.perf_counter()
            await client.request("POST", PODS, pod)
            created[name] = t

        first = time.perf_counter()
        await asyncio.gather(*(one(n) for n in names))
        pending = await scheduled.until(set(names), PENDING_TIMEOUT)
        ok = [n for n in names if n not in pending]
        latency = [scheduled.at[n] - created[n] for n in ok]
        done = [scheduled.at[n] for n in ok]
        return {
            "pod_create_to_scheduled": _ms(latency),
            "starts_per_s": _throughput(first, done),
            "not_scheduled": len(pending),
            "why_not": await _why_pending(client, pending),
        }

    async def delete_vms(self, client: KubeClient) -> None:
        """The namespace's VMs, VMIs and pods gone (pods at once: KWOK runs nothing): after
        KubeVirt alone, so that gpu-binder starts on an empty namespace and the count
        resource is free again; after each round of bench soak."""
        t = time.perf_counter()
        now = {"gracePeriodSeconds": 0}
        for path in (f"{KUBEVIRT}/virtualmachines", f"{KUBEVIRT}/virtualmachineinstances", PODS):
            await client.request(
                "DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", **now}
            )
        await kubevirt.shut_down(client, NAMESPACE)
        for path in (f"{KUBEVIRT}/virtualmachineinstances", PODS):
            while left := (await client.request("GET", path)).get("items"):
                if time.perf_counter() - t > DELETE_TIMEOUT:
                    held = sorted({f for o in left for f in o["metadata"].get("finalizers", [])})
                    raise RuntimeError(
                        f"{len(left)} objects of {path} not gone after {DELETE_TIMEOUT:.0f}s "
                        f"(finalizers {held})"
                    )
                await asyncio.sleep(0.5)
        say(f"VMs, VMIs and pods deleted in {time.perf_counter() - t:.1f}s")

    async def burst(self, client: KubeClient, scheduled: Scheduled, prefix: str) -> dict[str, Any]:
        """A burst of VM starts, KubeVirt's flow (bench.kubevirt); gpu-binder's if it runs."""
        names = [f"{prefix}-{i:04d}" for i in range(self.vms)]
        admitted: dict[str, float] = {}
        pod_created: dict[str, float] = {}
        pod_of: dict[str, str] = {}
        started: dict[str, float] = {}
        refused: list[str] = []
        pods_refused: list[str] = []
        # The VM controller's queue and the VMI controller's: each its own rate limiter.
        vm_queue, vmi_queue = kubevirt.Requeue(), kubevirt.Requeue()
        controller = scheduled.controller = kubevirt.VirtController(*self.threads)

        async def one(name: str) -> None:
            vm = builders.vm_object(
                name, NAMESPACE, [fleet.RESOURCE] * self.per_vm, run_strategy="Always"
            )
            raw = await client.request("POST", f"{KUBEVIRT}/virtualmachines", vm.to_dict())
            t = time.perf_counter()
            vmi = builders.vmi_for(type(vm).from_dict(raw))
            stored, sent = await kubevirt.create_vmi(client, vmi, refused, vm_queue, controller)
            admitted[name] = time.perf_counter() - sent
            started[name] = time.perf_counter() - t
            t = time.perf_counter()
            created = await kubevirt.create_launcher_pod(
                client, stored, pods_refused, vmi_queue, controller
            )
            pod_created[name] = t
            pod_of[name] = created["metadata"]["name"]

        first = time.perf_counter()
        await asyncio.gather(*(one(n) for n in names))
        pending = await scheduled.until(set(pod_of.values()), PENDING_TIMEOUT)
        ok = [n for n in names if pod_of[n] not in pending]
        latency = [scheduled.at[pod_of[n]] - pod_created[n] for n in ok]
        done = [scheduled.at[pod_of[n]] for n in ok]
        misplaced = (
            await self._misplaced(client, {n: pod_of[n] for n in ok}, scheduled.node)
            if prefix == "vm"
            else 0  # no sets without gpu-binder: wherever the scheduler put them
        )
        return {
            "vmi_create_to_admitted": _ms(list(admitted.values())),
            "vm_create_to_vmi_admitted": _ms(list(started.values())),
            "virt_controller": {
                "vm_threads": controller.vm_threads,
                "vmi_threads": controller.vmi_threads,
                "qps": controller.qps,
                "burst": controller.burst,
            },
            "vmi_refused_then_retried": len(refused),
            "refusals": sorted(set(refused))[:3],
            "pods_refused_then_retried": len(pods_refused),
            "pod_refusals": sorted(set(pods_refused))[:3],
            "pod_create_to_scheduled": _ms(latency),
            "starts_per_s": _throughput(first, done),
            "pods_not_on_their_sets_node": misplaced,
            "not_scheduled": len(pending),
            "why_not": await _why_pending(client, pending),
        }

    async def _misplaced(
        self, client: KubeClient, pod_of: dict[str, str], node_of_pod: dict[str, str]
    ) -> int:
        sets: dict[str, set[str]] = {}
        for d in (await client.list(GPUDevice)).items:
            b = d.status.binding
            if b is not None and b.vm.namespace == NAMESPACE:
                sets.setdefault(b.vm.name, set()).add(d.spec.node_name)
        return sum(1 for vm, pod in pod_of.items() if sets.get(vm) != {node_of_pod[pod]})


def main(
    nodes: int = 500,
    gpus: int = 8,
    vms: int = 1000,
    per_vm: int = 2,
    progress: Callable[[str], None] = say,
    gc_freeze_interval: str | None = None,
    threads: tuple[int, int] = (kubevirt.VM_CONTROLLER_THREADS, kubevirt.VMI_CONTROLLER_THREADS),
) -> dict[str, Any]:
    """`gc_freeze_interval`: the binder's --gc-freeze-interval (None: its default);
    `threads`: virt-controller's VM and VMI controller threads (0: one per VM)."""
    if vms * per_vm > nodes * gpus:
        raise ValueError(f"{vms} VMs of {per_vm} GPUs do not fit {nodes} × {gpus} GPUs")
    with tempfile.TemporaryDirectory(prefix="gpu-binder-bench-start-") as tmp:
        cp = ControlPlane(components=(SCHEDULER, CONTROLLER_MANAGER), progress=progress)
        with cp:
            progress(f"control plane up in {cp.startup_seconds:.1f}s")
            cp.install_crds(fleet.CRDS)
            install_rbac(cp)
            bench = Bench(cp, Path(tmp), nodes, gpus, vms, per_vm, gc_freeze_interval, threads)
            return asyncio.run(bench.run(cp.node_assets.kwok))


def install_rbac(cp: ControlPlane) -> None:
    """deploy/ledger/ledger.yaml, then deploy/binder/rbac.yaml, as a cluster applies them:
    the binder runs as its ServiceAccount, and its usage records have their namespace.
    Without the ledger's, every record's create was a 404, which aborted each full pass
    (after its binds, before its records, finalizers and VM annotations) and queued it
    again 100 ms later, all through the burst."""
    import yaml

    paths = {
        "Namespace": "/api/v1/namespaces",
        "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
        "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    }
    manifests = (fleet.DEPLOY / "ledger" / "ledger.yaml", fleet.DEPLOY / "binder" / "rbac.yaml")
    docs = [doc for path in manifests for doc in yaml.safe_load_all(path.read_text())]
    for doc in docs:
        if doc:
            path = paths[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
            resp = cp.request("POST", path, doc)
            if not (resp.ok or resp.status == 409):
                raise RuntimeError(f"installing {doc['kind']}: {resp.body[:300]!r}")
