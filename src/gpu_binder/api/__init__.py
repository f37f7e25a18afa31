"""Object types of gpu-binder: its own CRDs and the views of the kinds it reads."""

from gpu_binder.api.meta import Condition, ObjectMeta, OwnerReference
from gpu_binder.api.types import (
    API_VERSION,
    FINALIZER,
    GROUP,
    GPUBindRequest,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
)

__all__ = [
    "API_VERSION",
    "FINALIZER",
    "GROUP",
    "Condition",
    "GPUBindRequest",
    "GPUClass",
    "GPUDevice",
    "GPUUsageRecord",
    "ObjectMeta",
    "OwnerReference",
]
