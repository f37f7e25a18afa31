"""GPU models the embedded cluster installs, and GPUClass objects for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_binder.agent.models import NVIDIA, model_name
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUClass, GPUClassSpec


@dataclass(frozen=True, slots=True)
class GPUModel:
    device_id: str
    vendor_id: str = NVIDIA

    @property
    def name(self) -> str:
        return model_name(self.vendor_id, self.device_id)


H100 = GPUModel("0x2330")
A100 = GPUModel("0x20b2")
L40S = GPUModel("0x26b9")


def gpu_class(name: str, model: GPUModel, resource_name: str, **spec: Any) -> GPUClass:
    """A class of exactly one model; spec takes further GPUClassSpec fields in wire form,
    e.g. placement={"policy": "Spread"}, pinning="Node", cleaning="None"."""
    body = {
        "resourceName": resource_name,
        "match": {"vendorID": model.vendor_id, "deviceIDs": [model.device_id]},
        **spec,
    }
    return GPUClass(metadata=ObjectMeta(name=name), spec=GPUClassSpec.model_validate(body))
