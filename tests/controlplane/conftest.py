"""The real control plane (kube-apiserver + etcd) for tests marked ``controlplane``.

The binaries are looked up (KUBEBUILDER_ASSETS, TEST_ASSET_*, the cache) and, when missing
and Go is installed, built once per machine by scripts/build-controlplane.sh. That happens
after collection, outside any test's timeout, and only when a selected test needs it.
Without binaries or Go the tests are skipped with one line saying how to enable them,
except under CI=true, where they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml
from realcluster import Binders, BinderSetup, StartBinder  # noqa: F401 (tests import it from here)

from gpu_binder.devcluster.fleet import webhook_configuration
from gpu_binder.envtest import (
    AssetsBuildError,
    AssetsUnavailable,
    ControlPlane,
    ControlPlaneAssets,
    ensure_assets,
    free_port,
)
from gpu_binder.kube import KubeClient, connect

_resolved: ControlPlaneAssets | str | None = None  # assets, or the reason there are none


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _resolve(config: pytest.Config | None) -> ControlPlaneAssets | str:
    global _resolved
    if _resolved is not None:
        return _resolved
    reporter = config.pluginmanager.get_plugin("terminalreporter") if config else None

    def progress(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line, flush=True)

    try:
        _resolved = ensure_assets(progress=progress)
    except AssetsUnavailable as e:
        _resolved = f"real-control-plane tests skipped: {e}"
    except AssetsBuildError as e:
        _resolved = f"building the control plane failed: {e}"
    if isinstance(_resolved, str) and reporter is not None:
        reporter.write_line(_resolved.splitlines()[0])
    return _resolved


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.get_closest_marker("controlplane") for item in session.items):
        _resolve(session.config)


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def webhook_port() -> int:
    """The port the session's binders serve their webhooks on, known before the API
    server starts: its authorization webhook (deploy/apiserver/) calls it."""
    return free_port()


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config, webhook_port: int) -> Iterator[ControlPlane]:
    """One kube-apiserver + etcd for the whole session (admin: ``control_plane.admin``),
    authorizing as deploy/apiserver/authorization-config.yaml says: the node agent's reads
    beyond its node go to the binder's /authorize, the rest to RBAC."""
    assets = _resolve(pytestconfig)
    if isinstance(assets, str):
        if _in_ci() or assets.startswith("building"):
            pytest.fail(assets.replace("skipped", "cannot run (CI=true)"), pytrace=False)
        pytest.skip(assets)
    config = REPO / "deploy" / "apiserver" / "authorization-config.yaml"
    authorization = (
        yaml.safe_load(config.read_text()),
        f"https://127.0.0.1:{webhook_port}/authorize",
    )
    with ControlPlane(assets, authorization=authorization) as cp:
        yield cp


# --- gpu-binder against the control plane ---------------------------------------------
# The binder runs in the test's event loop, impersonating its own ServiceAccount, so every
# test also proves the ClusterRole in deploy/binder/rbac.yaml is enough. Its webhook
# listens on one port for the session, where the MutatingWebhookConfiguration of
# deploy/binder/webhook.yaml points, with a serving certificate of the control plane's CA.


@pytest.fixture(scope="session")
def binder_setup(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory, webhook_port: int
) -> BinderSetup:
    from realcluster import DEPLOY, install, put

    cp = control_plane
    cp.install_crds([DEPLOY / "crds", DEPLOY / "kubevirt" / "crds.yaml"])
    install(cp, DEPLOY / "ledger" / "ledger.yaml")
    install(cp, DEPLOY / "binder" / "rbac.yaml")
    # Every binder of the session writes under the policy narrowing its writes.
    install(cp, DEPLOY / "binder" / "own-writes-policy.yaml")
    port = webhook_port
    certs = tmp_path_factory.mktemp("webhook-certs")
    cert_file, key_file = cp.certs.ca.issue_serving("gpu-binder-webhook").write(certs, "tls")
    put(cp, webhook_configuration(f"https://127.0.0.1:{port}", cp.ca_pem))
    return BinderSetup(cp, port, cert_file, key_file)


@pytest.fixture
async def admin(binder_setup: BinderSetup) -> AsyncIterator[KubeClient]:
    async with await connect(str(binder_setup.cp.kubeconfig)) as client:
        yield client


@pytest.fixture
async def start_binder(binder_setup: BinderSetup) -> AsyncIterator[Binders]:
    binders = Binders(binder_setup)
    yield binders
    await binders.stop()
