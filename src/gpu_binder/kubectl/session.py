"""The plugin's connection to the cluster, as kubectl would make it: --kubeconfig (else
$KUBECONFIG, else ~/.kube/config, else the pod's service account), --context, and the
namespace of -n, else of the context, else of the pod, else `default`."""

from __future__ import annotations

import os
from pathlib import Path

from gpu_binder.kube import KubeClient, connect

POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


async def open_client(kubeconfig: str | None, context: str | None) -> KubeClient:
    """A client acting as the caller: the plugin does nothing the caller may not."""
    return await connect(kubeconfig, context=context)


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace kubectl would use without -n."""
    from kubernetes_asyncio.config import ConfigException, list_kube_config_contexts

    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    if path is not None or Path("~/.kube/config").expanduser().exists():
        try:
            contexts, current = list_kube_config_contexts(path)
        except (ConfigException, OSError):
            contexts, current = [], None
        chosen = next((c for c in contexts if c.get("name") == context), None) or current
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
        if namespace:
            return str(namespace)
    if POD_NAMESPACE_FILE.exists():
        return POD_NAMESPACE_FILE.read_text().strip() or "default"
    return "default"


def split_ref(ref: str, namespace: str) -> tuple[str, str]:
    """NS/NAME, or NAME in the given namespace."""
    ns, _, name = ref.rpartition("/")
    return (ns or namespace), name
