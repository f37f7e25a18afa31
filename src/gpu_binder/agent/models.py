"""Names of the PCI device ids the agent knows, in the words of the PCI id database."""

from __future__ import annotations

from dataclasses import dataclass

NVIDIA = "0x10de"


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    # An SXM part sits on a baseboard whose GPUs talk over NVSwitches; a PCIe card does not.
    sxm: bool


# (vendor, device) -> model; a GPU not listed is still discovered, named by its ids.
MODELS: dict[tuple[str, str], Model] = {
    (NVIDIA, "0x2330"): Model("GH100 [H100 SXM5 80GB]", sxm=True),
    (NVIDIA, "0x2324"): Model("GH100 [H800]", sxm=True),
    (NVIDIA, "0x2335"): Model("GH100 [H200 SXM 141GB]", sxm=True),
    (NVIDIA, "0x2331"): Model("GH100 [H100 PCIe]", sxm=False),
    (NVIDIA, "0x2321"): Model("GH100 [H100 NVL]", sxm=False),
    (NVIDIA, "0x2322"): Model("GH100 [H800 PCIe]", sxm=False),
    (NVIDIA, "0x20b0"): Model("GA100 [A100 SXM4 40GB]", sxm=True),
    (NVIDIA, "0x20b2"): Model("GA100 [A100 SXM4 80GB]", sxm=True),
    (NVIDIA, "0x20b5"): Model("GA100 [A100 PCIe 80GB]", sxm=False),
    (NVIDIA, "0x20f1"): Model("GA100 [A100 PCIe 40GB]", sxm=False),
    (NVIDIA, "0x26b9"): Model("AD102GL [L40S]", sxm=False),
    (NVIDIA, "0x26b5"): Model("AD102GL [L40]", sxm=False),
    (NVIDIA, "0x27b8"): Model("AD104GL [L4]", sxm=False),
    (NVIDIA, "0x1eb8"): Model("TU104GL [Tesla T4]", sxm=False),
    (NVIDIA, "0x1db4"): Model("GV100GL [Tesla V100 PCIe 16GB]", sxm=False),
    (NVIDIA, "0x1db1"): Model("GV100GL [Tesla V100 SXM2 16GB]", sxm=True),
}


def model_of(vendor: str, device: str) -> Model | None:
    return MODELS.get((vendor, device))


def model_name(vendor: str, device: str) -> str:
    """The known name, else `vendor:device` so an unknown GPU is still told apart."""
    known = MODELS.get((vendor, device))
    return known.name if known else f"{vendor.removeprefix('0x')}:{device.removeprefix('0x')}"
