"""GPU models the embedded cluster installs, and GPUClass objects for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpu_binder.agent.models import NVIDIA, model_name
from gpu_binder.api.types import GPUClass
from gpu_binder.sim import builders


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
    return builders.gpu_class(
        name, resource_name, model.device_id, vendor_id=model.vendor_id, **spec
    )
