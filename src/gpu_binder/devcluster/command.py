"""`make dev-cluster`: a local API server with simulated GPU nodes and gpu-binder running.

Starts the envtest control plane (kube-apiserver + etcd), installs gpu-binder's CRDs, the
KubeVirt VM/VMI CRDs and a KubeVirt CR, the binder's RBAC and webhook configuration,
creates a GPU class and simulated GPU nodes (Node objects serving slot resources, and their
GPUDevices), then runs the binder and its webhook against it until Ctrl-C. kubectl works
with the printed KUBECONFIG; creating a VirtualMachine with GPUs binds them, and creating
its VirtualMachineInstance goes through the webhook. Nothing runs the VMs: there is no
KubeVirt controller.

``--kwok N`` adds kube-scheduler, kube-controller-manager and N KWOK nodes of
``--gpus-per-node`` GPUs (slot resources in allocatable, as the agent serves them): pods
created for a VMI are scheduled by the real scheduler. ``--kubelet`` adds a real node
(containerd + kubelet, needs root and scripts/install-node-packages.sh) whose device
plugin is the agent on a GPU sysfs fixture. Both need ``scripts/build-controlplane.sh
--node``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpu_binder.binder import Config
from gpu_binder.cli.logs import setup as setup_logs
from gpu_binder.devcluster import fleet
from gpu_binder.devcluster.kwoknodes import SCHEDULABLE, seed_kwok
from gpu_binder.envtest import (
    AssetsBuildError,
    AssetsUnavailable,
    ControlPlane,
    ControlPlaneError,
    free_port,
)
from gpu_binder.envtest.components import CONTROLLER_MANAGER, SCHEDULER
from gpu_binder.envtest.kwok import start_kwok
from gpu_binder.envtest.node import KubeletNode
from gpu_binder.envtest.process import Process
from gpu_binder.envtest.sysfs import write_gpu_host
from gpu_binder.kube import KubeClient, connect
from gpu_binder.kube.client import APPLY_PATCH
from gpu_binder.kube.manager import Manager, Options, WebhookOptions

COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "KubeVirt": "/apis/kubevirt.io/v1/namespaces/{ns}/kubevirts",
}


async def apply(client: KubeClient, doc: dict[str, Any]) -> None:
    """Server-side apply one manifest document (created when absent)."""
    meta = doc["metadata"]
    path = COLLECTIONS[doc["kind"]].format(ns=meta.get("namespace", ""))
    query = {"fieldManager": "gpu-binder-dev-cluster", "force": "true"}
    await client.request(
        "PATCH", f"{path}/{meta['name']}", doc, query=query, content_type=APPLY_PATCH
    )


async def prepare(client: KubeClient, nodes: int, gpus: int) -> None:
    for path in (fleet.DEPLOY / "ledger" / "ledger.yaml", fleet.DEPLOY / "binder" / "rbac.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                await apply(client, doc)
    await apply(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubevirt"}})
    await apply(
        client,
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": {}},
        },
    )
    await apply(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}})
    try:
        await client.create(fleet.gpu_class())
    except Exception as e:  # an existing class is fine; anything else is shown
        logging.getLogger(__name__).info("class h100: %s", e)
    await fleet.seed(client, [f"gpu-node-{i}" for i in range(nodes)], gpus)


def example(kubeconfig: Path) -> str:
    vm = fleet.vm("demo", "vm-1", 2).raw
    return (
        f"export KUBECONFIG={kubeconfig}\n"
        "kubectl get gpudevices\n"
        "kubectl apply -f - <<EOF\n"
        f"{yaml.safe_dump(vm, sort_keys=False)}EOF\n"
        "kubectl get gpudevices -o custom-columns=NAME:.metadata.name,PHASE:.status.phase,"
        "VM:.status.binding.vm.name\n"
    )


async def serve(
    cp: ControlPlane,
    work: Path,
    nodes: int,
    gpus: int,
    metrics_port: int,
    kwok: int = 0,
    kubelet: bool = False,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with await connect(str(cp.kubeconfig)) as client:
        await prepare(client, nodes, gpus)
        extra = await node_path(cp, client, work, gpus, kwok, kubelet)
        port = free_port()
        cert, key = cp.certs.ca.issue_serving("gpu-binder-webhook").write(work, "webhook")
        config = fleet.webhook_configuration(f"https://127.0.0.1:{port}", cp.ca_pem)
        await fleet.put_webhook_configuration(client, config)
        options = Options(
            identity="dev-cluster",
            # As the chart sets it up: only the API server's webhook client certificate.
            webhook=WebhookOptions(
                cert,
                key,
                host="127.0.0.1",
                port=port,
                client_ca_file=cp.webhook_client.ca_file,
                client_names=(cp.webhook_client.name,),
            ),
            metrics_host="127.0.0.1",
            metrics_port=metrics_port,
        )
        manager = Manager(client, Config(), options)
        task = asyncio.create_task(manager.run(stop))
        await manager.informers.wait_synced()
        print(
            f"\ngpu-binder dev cluster: {nodes} nodes × {gpus} GPUs (class h100), binder and "
            f"webhook running; metrics on http://127.0.0.1:{metrics_port}/metrics\n"
            f"kubeconfig: {cp.kubeconfig}\n\n{example(cp.kubeconfig)}\nCtrl-C to stop.",
            flush=True,
        )
        try:
            await task
        finally:
            for stop_ in reversed(extra):
                stop_()


async def node_path(
    cp: ControlPlane, client: KubeClient, work: Path, gpus: int, kwok: int, kubelet: bool
) -> list[Callable[[], None]]:
    """KWOK nodes and a real node, as asked; what stops them, in order."""
    stops: list[Callable[[], None]] = []
    if kwok:
        proc = start_kwok(cp.node_assets.kwok, work, cp.kubeconfig)
        stops.append(proc.stop)
        names = [f"kwok-node-{i}" for i in range(kwok)]
        await seed_kwok(client, names, gpus)
        print(f"{kwok} KWOK nodes × {gpus} GPUs", file=sys.stderr)
    if kubelet:
        node = KubeletNode(cp, cp.node_assets.kubelet, "real-node", labels={SCHEDULABLE: "true"})
        await asyncio.to_thread(node.start)
        stops.append(node.stop)
        host = work / "host"
        write_gpu_host(host, gpus)
        agent = Process("agent", work / "logs" / "agent.log")
        # The admin's kubeconfig: a dev cluster has no agent pod to bind a token to.
        agent.start(
            [
                sys.executable,
                "-m",
                "gpu_binder.cli.main",
                "agent",
                f"--root={host}",
                f"--host-vfio-dir={host / 'dev' / 'vfio'}",
                f"--node={node.name}",
                f"--device-plugin-dir={node.device_plugin_dir}",
                f"--kubeconfig={cp.kubeconfig}",
            ]
        )
        stops.append(agent.stop)
        print(
            f"real node {node.name} Ready (containerd + kubelet, logs in {node.work}/logs); "
            f"the agent serves {gpus} fixture GPUs (log {agent.log_path})",
            file=sys.stderr,
        )
    return stops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpu_binder.devcluster", description=__doc__)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--metrics-port", type=int, default=8080)
    p.add_argument("--log-level", default="info")
    p.add_argument("--kwok", type=int, default=0, metavar="N", help="N KWOK GPU nodes too")
    p.add_argument("--kubelet", action="store_true", help="a real node too (root)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    setup_logs(args.log_level, "text")
    components = (SCHEDULER, CONTROLLER_MANAGER) if args.kwok or args.kubelet else ()
    with tempfile.TemporaryDirectory(prefix="gpu-binder-dev-") as tmp:
        try:
            with ControlPlane(
                progress=lambda line: print(line, file=sys.stderr), components=components
            ) as cp:
                cp.install_crds(fleet.CRDS)
                asyncio.run(
                    serve(
                        cp,
                        Path(tmp),
                        args.nodes,
                        args.gpus_per_node,
                        args.metrics_port,
                        args.kwok,
                        args.kubelet,
                    )
                )
        except (AssetsUnavailable, AssetsBuildError, ControlPlaneError) as e:
            print(f"dev-cluster: {e}", file=sys.stderr)
            return 1
    return 0
