"""Where the API server is and how to authenticate to it: a kubeconfig or the pod's own.

kubernetes-asyncio reads the kubeconfig (client certificates, tokens, exec plugins) and the
in-cluster service-account files, refreshing tokens that rotate; the requests themselves go
through gpu-binder's own aiohttp session (see client.py).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

# Headers to add to every request: the bearer token, refreshed when it rotates.
AuthHeaders = Callable[[], Awaitable[dict[str, str]]]


class ConfigError(Exception):
    """No usable kubeconfig or in-cluster configuration; says which and why."""


@dataclass(frozen=True, slots=True)
class Connection:
    server: str
    ssl: ssl.SSLContext | bool
    auth: AuthHeaders | None = None


async def load(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The kubeconfig file when given; else the pod's service account; else $KUBECONFIG."""
    cfg = k8s_client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            if kubeconfig is not None and not os.path.exists(kubeconfig):
                raise ConfigError(f"kubeconfig {kubeconfig} does not exist")
            await k8s_config.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
    except k8s_config.ConfigException as e:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ConfigError(f"no usable cluster configuration ({where}, not in a pod): {e}") from e
    return Connection(server=str(cfg.host).rstrip("/"), ssl=_ssl(cfg), auth=_auth(cfg))


def _ssl(cfg: k8s_client.Configuration) -> ssl.SSLContext | bool:
    if not cfg.verify_ssl:
        return False
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def _auth(cfg: k8s_client.Configuration) -> AuthHeaders | None:
    if "BearerToken" not in cfg.api_key and cfg.refresh_api_key_hook is None:
        return None

    async def headers() -> dict[str, str]:
        # Runs the loader's refresh hook, which re-reads a rotated service-account token.
        token = await cfg.get_api_key_with_prefix("BearerToken")
        return {"Authorization": str(token)} if token else {}

    return headers
