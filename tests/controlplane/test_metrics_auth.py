"""/metrics does not tell anonymous callers what each tenant holds (issue 11): on a real
API server, the binder (as its own ServiceAccount) serves /metrics over HTTPS only to a
bearer token the API server vouches for, of a user allowed `get` on /metrics; the probes
stay open. Before, anyone reaching the port read gpu_binder_tenant_gpus of every tenant.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import aiohttp
import pytest
from realcluster import BINDER_SA, DEPLOY, Fleet, eventually, install, namespace, put, uid

from conftest import BinderSetup
from gpu_binder.binder.config import Config
from gpu_binder.envtest import free_port
from gpu_binder.kube import KubeClient, connect
from gpu_binder.kube.leaderelection import Timings
from gpu_binder.kube.manager import Manager, Options, WebhookOptions

pytestmark = pytest.mark.controlplane

SERIES = "gpu_binder_tenant_gpus"


@dataclass
class Served:
    url: str
    ctx: ssl.SSLContext
    namespace: str

    async def get(self, path: str, token: str = "") -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        connector = aiohttp.TCPConnector(ssl=self.ctx)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(self.url + path, headers=headers) as resp,
        ):
            return resp.status, await resp.text()


def account_token(setup: BinderSetup, ns: str, name: str) -> str:
    cp = setup.cp
    put(cp, {"kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
    answer = cp.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert answer.status == 201, answer.body
    token: str = answer.json()["status"]["token"]
    return token


@pytest.fixture
async def served(binder_setup: BinderSetup, admin: KubeClient) -> AsyncIterator[Served]:
    """A binder with its metrics server as the chart runs it, and a tenant holding GPUs."""
    setup = binder_setup
    fleet = Fleet(admin)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(setup.cp)
    await fleet.create_vm(ns, "vm", gpus=2)
    port = free_port()
    options = Options(
        identity=f"metrics-{uid()}",
        lease_name=f"gpu-binder-{uid()}",
        timings=Timings(4.0, 3.0, 0.5),
        webhook=WebhookOptions(setup.cert_file, setup.key_file, host="127.0.0.1", port=free_port()),
        metrics_host="127.0.0.1",
        metrics_port=port,
        metrics_auth=True,
        metrics_tls=True,
    )
    async with await connect(str(setup.cp.kubeconfig), impersonate=BINDER_SA) as client:
        manager = Manager(client, Config(resync=timedelta(seconds=1)), options)
        stop = asyncio.Event()
        task = asyncio.create_task(manager.run(stop))
        try:
            await eventually(lambda: fleet.set_of(ns, "vm"), what="the tenant's set bound")
            ctx = ssl.create_default_context(cadata=setup.cp.ca_pem.decode())
            yield Served(f"https://127.0.0.1:{port}", ctx, ns)
        finally:
            stop.set()
            await task


async def test_anonymous_metrics_are_refused_without_tenant_series(served: Served) -> None:
    status, text = await served.get("/metrics")
    assert status == 401
    assert SERIES not in text and served.namespace not in text


async def test_a_token_not_allowed_metrics_is_refused(
    binder_setup: BinderSetup, served: Served
) -> None:
    token = account_token(binder_setup, served.namespace, "nosy")
    status, text = await served.get("/metrics", token)
    assert status == 403
    assert SERIES not in text


async def test_a_token_allowed_get_on_metrics_reads_the_tenant_series(
    binder_setup: BinderSetup, served: Served
) -> None:
    cp = binder_setup.cp
    install(cp, DEPLOY / "binder" / "rbac.yaml")  # the gpu-binder-metrics-reader role
    token = account_token(binder_setup, served.namespace, "prometheus")
    put(
        cp,
        {
            "kind": "ClusterRoleBinding",
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": f"metrics-{uid()}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "gpu-binder-metrics-reader",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "prometheus", "namespace": served.namespace}
            ],
        },
    )

    async def scraped() -> str | None:
        status, text = await served.get("/metrics", token)
        return text if status == 200 and f'namespace="{served.namespace}"' in text else None

    text = await eventually(scraped, what="an allowed scrape with the tenant's series")
    assert f'namespace="{served.namespace}",state="bound"}} 2.0' in text


async def test_the_probes_stay_open(served: Served) -> None:
    assert (await served.get("/healthz"))[0] == 200
    assert (await served.get("/readyz"))[0] == 200
