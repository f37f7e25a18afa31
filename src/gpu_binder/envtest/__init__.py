"""A local real control plane (kube-apiserver + etcd; kube-scheduler, kube-controller-manager,
a kubelet on containerd and KWOK for the node path) for tests and ``make dev-cluster``.

Started the way controller-runtime's envtest starts it; see docs/CONTROLPLANE.md.
"""

from .assets import (
    DEFAULT_K8S_VERSION,
    DEFAULT_KWOK_VERSION,
    HOW_TO_ENABLE,
    AssetsBuildError,
    AssetsUnavailable,
    ControlPlaneAssets,
    NodeAssets,
    build_assets,
    cache_dir,
    ensure_assets,
    ensure_node_assets,
    find_assets,
    find_node_assets,
    k8s_version,
)
from .certs import CertificateAuthority, ControlPlaneCerts, KeyPair, generate_control_plane_certs
from .controlplane import ApiResponse, ControlPlane, ControlPlaneError, User
from .process import free_port

__all__ = [
    "DEFAULT_K8S_VERSION",
    "DEFAULT_KWOK_VERSION",
    "HOW_TO_ENABLE",
    "ApiResponse",
    "AssetsBuildError",
    "AssetsUnavailable",
    "CertificateAuthority",
    "ControlPlane",
    "ControlPlaneAssets",
    "ControlPlaneCerts",
    "ControlPlaneError",
    "KeyPair",
    "NodeAssets",
    "User",
    "build_assets",
    "cache_dir",
    "ensure_assets",
    "ensure_node_assets",
    "find_assets",
    "find_node_assets",
    "free_port",
    "generate_control_plane_certs",
    "k8s_version",
]
