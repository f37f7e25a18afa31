"""The node path on real components (DESIGN.md §7.4), tests marked ``node``.

One control plane for the session with kube-scheduler and kube-controller-manager, one
real node (containerd + runc + kubelet) whose device plugin is the project's agent on an
HGX H100 sysfs fixture, gpu-binder's binder and webhook as a process, KWOK for simulated
nodes. Its own control plane, not tests/controlplane's: the controller-manager garbage-
collects, finalizes namespaces and marks heartbeat-less nodes NotReady, which the
simulated nodes of that tier would not survive.

The tier runs whenever its binaries are there (the cache, or KUBEBUILDER_ASSETS); under
CI=true they are built once per machine after collection if missing
(scripts/build-controlplane.sh --node, about 18 min on 2 cores after the apiserver). The
Debian packages come from scripts/install-node-packages.sh (.ci/run runs it). Without them
the tier is skipped with one line saying so, except under CI=true, where it fails.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# The other tiers' building blocks: realcluster (objects, binder RBAC), fake_sysfs.
for tier in ("controlplane", "agent"):
    if str(HERE.parent / tier) not in sys.path:
        sys.path.insert(0, str(HERE.parent / tier))

from nodecluster import (  # noqa: E402
    DEPLOY_FILES,
    H100_DEVICE_ID,
    H100_RESOURCE,
    L40S_DEVICE_ID,
    L40S_RESOURCE,
    SCHEDULABLE,
    AgentProcess,
    BinderProcess,
    KwokNodes,
    NodeTier,
    agent_kubeconfig,
    h100_host,
    install,
    wait_for,
    webhook_for,
)
from realcluster import DEPLOY, put, uid  # noqa: E402

from gpu_binder.devcluster import fleet  # noqa: E402
from gpu_binder.devcluster.kwoknodes import seed_kwok  # noqa: E402
from gpu_binder.envtest import (  # noqa: E402
    AssetsBuildError,
    AssetsUnavailable,
    ControlPlane,
    ControlPlaneAssets,
    NodeAssets,
    ensure_assets,
    ensure_node_assets,
)
from gpu_binder.envtest.components import CONTROLLER_MANAGER, SCHEDULER  # noqa: E402
from gpu_binder.envtest.kwok import start_kwok  # noqa: E402
from gpu_binder.envtest.node import KubeletNode, node_packages_missing  # noqa: E402
from gpu_binder.kube import KubeClient, connect  # noqa: E402

_resolved: tuple[ControlPlaneAssets, NodeAssets] | str | None = None


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _resolve(config: pytest.Config | None) -> tuple[ControlPlaneAssets, NodeAssets] | str:
    global _resolved
    if _resolved is not None:
        return _resolved
    reporter = config.pluginmanager.get_plugin("terminalreporter") if config else None

    def progress(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    missing = node_packages_missing()
    if os.geteuid() != 0:
        _resolved = "real-node tests skipped: a kubelet and containerd need root"
    elif missing:
        _resolved = (
            f"real-node tests skipped: no {', '.join(missing)}; "
            "scripts/install-node-packages.sh installs them"
        )
    else:
        try:
            # Built here only under CI: on a developer's machine the node tier's 18 minutes
            # of compiling are asked for by `scripts/build-controlplane.sh --node`.
            node = ensure_node_assets(build=_in_ci(), progress=progress)
            _resolved = (ensure_assets(progress=progress), node)
        except AssetsUnavailable as e:
            _resolved = f"real-node tests skipped: {e}"
        except AssetsBuildError as e:
            _resolved = f"building the node components failed: {e}"
    if isinstance(_resolved, str) and reporter is not None:
        reporter.write_line(_resolved.splitlines()[0])
    return _resolved


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.get_closest_marker("node") for item in session.items):
        _resolve(session.config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.node)


async def _create_class(cp: ControlPlane) -> None:
    async with await connect(str(cp.kubeconfig)) as client:
        await client.create(fleet.gpu_class("h100", H100_RESOURCE, H100_DEVICE_ID))


@pytest.fixture
async def admin(tier: NodeTier) -> AsyncIterator[KubeClient]:
    async with await connect(str(tier.cp.kubeconfig)) as client:
        yield client


@pytest.fixture(scope="session")
def node_plane(pytestconfig: pytest.Config) -> Iterator[tuple[ControlPlane, NodeAssets]]:
    """The session's control plane: etcd, apiserver, scheduler, controller-manager."""
    resolved = _resolve(pytestconfig)
    if isinstance(resolved, str):
        if _in_ci() or resolved.startswith("building"):
            pytest.fail(resolved.replace("skipped", "cannot run (CI=true)"), pytrace=False)
        pytest.skip(resolved)
    assets, node_assets = resolved
    with ControlPlane(
        assets, components=(SCHEDULER, CONTROLLER_MANAGER), node_assets=node_assets
    ) as cp:
        cp.install_crds([DEPLOY / "crds", DEPLOY / "kubevirt" / "crds.yaml"])
        for file in DEPLOY_FILES:
            install(cp, file)
        yield cp, node_assets


@pytest.fixture(scope="session")
def tier(
    node_plane: tuple[ControlPlane, NodeAssets], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeTier]:
    """The real node with the agent as its device plugin, the binder and its webhook."""
    cp, assets = node_plane
    work = tmp_path_factory.mktemp("node-tier")
    webhook = webhook_for(cp, work)
    config = fleet.webhook_configuration(f"https://127.0.0.1:{webhook.port}", cp.ca_pem)
    put(cp, config)
    asyncio.run(_create_class(cp))
    node = KubeletNode(cp, assets.kubelet, f"node-{uid()}", labels={SCHEDULABLE: "true"})
    binder: BinderProcess | None = None
    agent: AgentProcess | None = None
    with node:
        host = h100_host(work / "host")
        kubeconfig = agent_kubeconfig(cp, node, work / "agent.kubeconfig")
        binder = BinderProcess(cp, work, webhook).start()
        agent = AgentProcess(node, host, kubeconfig).start()
        t = NodeTier(cp, assets, node, host, agent, binder, webhook, work)
        try:
            wait_for(lambda: len(t.served_slots()) == 8, 60, "8 slot resources on the node")
            yield t
        finally:
            agent.stop()
            binder.stop()


@pytest.fixture(scope="session")
def kwok(tier: NodeTier) -> Iterator[KwokNodes]:
    """Three KWOK nodes of 4 L40S each, their slot resources in allocatable."""
    cp = tier.cp
    proc = start_kwok(tier.assets.kwok, tier.work, cp.kubeconfig)
    names = [f"kwok-{uid()}-{i}" for i in range(3)]

    async def seed() -> None:
        async with await connect(str(cp.kubeconfig)) as client:
            # No agent runs on KWOK nodes to reset a released GPU: no cleaning.
            await client.create(
                fleet.gpu_class("l40s", L40S_RESOURCE, L40S_DEVICE_ID, cleaning="None")
            )
            await seed_kwok(client, names, 4, L40S_DEVICE_ID)

    try:
        asyncio.run(seed())
        yield KwokNodes(names)
    finally:
        proc.stop()
