"""The webhook's HTTPS server: VMI AdmissionReviews on /mutate, Pod ones on /mutate-pods,
400 for malformed ones, a refusal saying gpu-binder is not available before its caches
are synced, and a serving certificate reloaded when its files change."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from gpu_binder.cache import World
from gpu_binder.envtest import CertificateAuthority, free_port
from gpu_binder.kube.metrics import RunMetrics
from gpu_binder.kube.webhookserver import NOT_READY, CertificateFiles, WebhookServer
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook import Admitter
from gpu_binder.webhook.pods import PodPinner
from gpu_binder.webhook.review import review_request

REVIEW = review_request({"metadata": {"name": "vmi", "namespace": "ns"}, "spec": {}}, uid="u-1")
GPU_VMI = {
    "metadata": {"name": "vmi", "namespace": "ns"},
    "spec": {"domain": {"devices": {"gpus": [{"name": "g", "deviceName": "nvidia.com/H100"}]}}},
}
POD = {
    "metadata": {"generateName": "virt-launcher-vmi-", "labels": {"kubevirt.io": "virt-launcher"}},
    "spec": {"containers": [{"name": "compute", "resources": {"limits": {"cpu": "1"}}}]},
}
POD_REVIEW = review_request(POD, uid="p-1", namespace="ns", group="", kind="Pod")


class Served:
    def __init__(self, ca: CertificateAuthority, port: int, certs: CertificateFiles) -> None:
        self.ca = ca
        self.url = f"https://127.0.0.1:{port}"
        self.certs = certs

    def client(self) -> aiohttp.ClientSession:
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True))


async def serve(tmp_path: Path, ready: bool = True) -> tuple[WebhookServer, Served]:
    ca = CertificateAuthority()
    ca.issue_serving("first").write(tmp_path, "tls")
    certs = CertificateFiles(tmp_path / "tls.crt", tmp_path / "tls.key")
    port = free_port()
    world = World()
    server = WebhookServer(
        Admitter(world, MemoryClient()),
        certs,
        RunMetrics(CollectorRegistry()),
        pods=PodPinner(world, client=MemoryClient()),
        host="127.0.0.1",
        port=port,
        reload_interval=0.05,
        ready=lambda: ready,
    )
    await server.start()
    return server, Served(ca, port, certs)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    server, served = await serve(tmp_path)
    yield served
    await server.stop()


@pytest.fixture
async def starting(tmp_path: Path) -> AsyncIterator[Served]:
    """A replica whose caches are not synced yet."""
    server, served = await serve(tmp_path, ready=False)
    yield served
    await server.stop()


async def test_a_vmi_without_gpus_is_admitted_untouched(served: Served) -> None:
    async with served.client() as s, s.post(served.url + "/mutate", json=REVIEW) as resp:
        body = await resp.json()
    assert resp.status == 200
    assert body["response"] == {"uid": "u-1", "allowed": True}


async def test_a_pod_without_gpus_is_admitted_untouched_on_its_own_path(served: Served) -> None:
    async with served.client() as s, s.post(served.url + "/mutate-pods", json=POD_REVIEW) as resp:
        body = await resp.json()
    assert resp.status == 200
    assert body["response"] == {"uid": "p-1", "allowed": True}


@pytest.mark.parametrize(
    ("path", "review", "uid"),
    [("/mutate", review_request(GPU_VMI, uid="u-2"), "u-2"), ("/mutate-pods", POD_REVIEW, "p-1")],
)
async def test_a_replica_not_synced_yet_refuses_saying_gpu_binder_is_unavailable(
    starting: Served, path: str, review: dict[str, object], uid: str
) -> None:
    async with starting.client() as s, s.post(starting.url + path, json=review) as resp:
        body = await resp.json()
    assert resp.status == 200
    assert body["response"]["uid"] == uid
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"] == NOT_READY
    assert NOT_READY.startswith("gpu-binder is unavailable")


@pytest.mark.parametrize("path", ["/mutate", "/mutate-pods"])
@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "the body is not JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
    ],
)
async def test_a_malformed_review_gets_400_with_the_reason(
    served: Served, path: str, payload: bytes, reason: str
) -> None:
    async with served.client() as s, s.post(served.url + path, data=payload) as resp:
        text = await resp.text()
    assert resp.status == 400
    assert reason in text


async def test_a_replaced_certificate_is_served_without_a_restart(
    served: Served, tmp_path: Path
) -> None:
    assert await _served_name(served) == "first"
    served.ca.issue_serving("second").write(tmp_path, "tls")

    async with asyncio.timeout(5):
        while await _served_name(served) != "second":
            await asyncio.sleep(0.05)


async def _served_name(served: Served) -> str:
    host, port = served.url.removeprefix("https://").split(":")
    pem = await asyncio.to_thread(ssl.get_server_certificate, (host, int(port)))
    cert = x509.load_pem_x509_certificate(pem.encode())
    return str(cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value)
