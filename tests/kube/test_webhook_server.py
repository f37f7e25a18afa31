"""The webhook's HTTPS server: AdmissionReviews on /mutate, 400 for malformed ones, and a
serving certificate reloaded when its files change."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from gpu_binder.binder.world import World
from gpu_binder.envtest import CertificateAuthority, free_port
from gpu_binder.kube.metrics import RunMetrics
from gpu_binder.kube.webhookserver import CertificateFiles, WebhookServer
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook import Admitter
from gpu_binder.webhook.review import review_request

REVIEW = review_request({"metadata": {"name": "vmi", "namespace": "ns"}, "spec": {}}, uid="u-1")


class Served:
    def __init__(self, ca: CertificateAuthority, port: int, certs: CertificateFiles) -> None:
        self.ca = ca
        self.url = f"https://127.0.0.1:{port}"
        self.certs = certs

    def client(self) -> aiohttp.ClientSession:
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    ca = CertificateAuthority()
    ca.issue_serving("first").write(tmp_path, "tls")
    certs = CertificateFiles(tmp_path / "tls.crt", tmp_path / "tls.key")
    port = free_port()
    server = WebhookServer(
        Admitter(World(), MemoryClient()),
        certs,
        RunMetrics(CollectorRegistry()),
        host="127.0.0.1",
        port=port,
        reload_interval=0.05,
    )
    await server.start()
    yield Served(ca, port, certs)
    await server.stop()


async def test_a_vmi_without_gpus_is_admitted_untouched(served: Served) -> None:
    async with served.client() as s, s.post(served.url + "/mutate", json=REVIEW) as resp:
        body = await resp.json()
    assert resp.status == 200
    assert body["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "the body is not JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
    ],
)
async def test_a_malformed_review_gets_400_with_the_reason(
    served: Served, payload: bytes, reason: str
) -> None:
    async with served.client() as s, s.post(served.url + "/mutate", data=payload) as resp:
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
