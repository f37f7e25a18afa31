"""A local real control plane (kube-apiserver + etcd) for tests and ``make dev-cluster``.

Started the way controller-runtime's envtest starts it; see docs/CONTROLPLANE.md.
"""

from .assets import (
    DEFAULT_K8S_VERSION,
    HOW_TO_ENABLE,
    AssetsBuildError,
    AssetsUnavailable,
    ControlPlaneAssets,
    build_assets,
    cache_dir,
    ensure_assets,
    find_assets,
    k8s_version,
)
from .certs import CertificateAuthority, ControlPlaneCerts, KeyPair, generate_control_plane_certs
from .controlplane import ApiResponse, ControlPlane, ControlPlaneError, User
from .process import free_port

__all__ = [
    "DEFAULT_K8S_VERSION",
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
    "User",
    "build_assets",
    "cache_dir",
    "ensure_assets",
    "find_assets",
    "free_port",
    "generate_control_plane_certs",
    "k8s_version",
]
