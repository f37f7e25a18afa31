"""The webhook serves the API server only (issue 11): on a real API server, whose
AdmissionConfiguration kubeconfig gives it a client certificate for webhooks
(gpu_binder.envtest.webhookclient), a review posted straight to the webhook's port is
refused at the TLS handshake, with no certificate or with another CA's (a tenant's), while
the API server's own calls are admitted and pinned.

Before, the webhook answered such a review, with another tenant's node, devices and
slots, and created a bind request in that tenant's namespace.
"""

from __future__ import annotations

import asyncio
import ssl

import orjson
import pytest
from realcluster import Fleet, eventually, namespace, vmi_of

from conftest import BinderSetup, StartBinder
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import DEVICES_ANNOTATION
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient
from gpu_binder.webhook.review import review_request

pytestmark = pytest.mark.controlplane


async def post_straight(setup: BinderSetup, ctx: ssl.SSLContext, body: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.webhook_port, ssl=ctx)
    writer.write(
        f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def trusting(cp: ControlPlane) -> ssl.SSLContext:
    """A client that trusts the webhook's serving certificate (the control plane's CA)."""
    return ssl.create_default_context(cadata=cp.ca_pem.decode())


async def a_bound_vm(
    cp: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> tuple[Fleet, str, VirtualMachine, bytes]:
    """Another tenant's VM with a bound set, and a review of a VMI naming it."""
    fleet = Fleet(admin)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(cp)
    await start_binder()
    vm = await fleet.create_vm(ns, "vm", gpus=2)
    await eventually(lambda: fleet.whole_set(ns, "vm", 2), what="a set bound")
    review = review_request(vmi_of(vm, ns, "vm", fleet.gpus(2)).raw, uid="forged")
    return fleet, ns, vm, orjson.dumps(review)


async def refused_at_tls(setup: BinderSetup, ctx: ssl.SSLContext, body: bytes) -> bool:
    try:
        answer = await post_straight(setup, ctx, body)
    except (ssl.SSLError, ConnectionError):
        return True
    # TLS 1.3 may end the connection without an error the client sees: no HTTP came.
    return answer == b""


async def test_a_review_without_a_client_certificate_is_refused_at_tls(
    binder_setup: BinderSetup, admin: KubeClient, start_binder: StartBinder
) -> None:
    *_, review = await a_bound_vm(binder_setup.cp, admin, start_binder)
    assert await refused_at_tls(binder_setup, trusting(binder_setup.cp), review)


async def test_a_tenants_client_certificate_is_refused_at_tls(
    binder_setup: BinderSetup, admin: KubeClient, start_binder: StartBinder
) -> None:
    cp = binder_setup.cp
    *_, review = await a_bound_vm(cp, admin, start_binder)
    alice = cp.add_user("alice", ["tenants"])  # signed by the cluster's client CA
    ctx = trusting(cp)
    ctx.load_cert_chain(alice.cert_file, alice.key_file)
    assert await refused_at_tls(binder_setup, ctx, review)


async def test_the_api_servers_calls_are_admitted_and_pinned(
    binder_setup: BinderSetup, admin: KubeClient, start_binder: StartBinder
) -> None:
    cp = binder_setup.cp
    fleet, ns, vm, _ = await a_bound_vm(cp, admin, start_binder)
    vmi = await admin.create(vmi_of(vm, ns, "vm", fleet.gpus(2)))
    assert DEVICES_ANNOTATION in vmi.metadata.annotations
