"""gpu-binder on a real Kubernetes API server: client, informers, leader election, `run`.

The pieces follow controller-runtime's: client.py, cache.py (informers), queue.py,
leaderelection.py, controller.py, manager.py, webhookserver.py, command.py.
"""

from __future__ import annotations

from gpu_binder.kube.client import KubeClient
from gpu_binder.kube.config import ConfigError, Connection, load


async def connect(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    impersonate: tuple[str, tuple[str, ...]] | None = None,
) -> KubeClient:
    """A client for the kubeconfig's cluster, or the pod's own when kubeconfig is None."""
    return KubeClient(await load(kubeconfig, context), impersonate=impersonate)


__all__ = ["ConfigError", "Connection", "KubeClient", "connect", "load"]
