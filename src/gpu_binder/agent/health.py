"""Whether a GPU can be passed through to a VM right now, and if not, why — in words."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_binder.agent.discovery import GPU, Scan
from gpu_binder.api.types import Health

VFIO_DRIVER = "vfio-pci"
# Drivers VFIO accepts on the other functions of a GPU's IOMMU group.
GROUP_SAFE_DRIVERS = frozenset({"", VFIO_DRIVER, "pci-stub"})


@dataclass(frozen=True, slots=True)
class Verdict:
    health: Health
    message: str

    @classmethod
    def of(cls, reasons: list[str]) -> Verdict:
        if not reasons:
            return cls(Health.HEALTHY, "")
        return cls(Health.UNHEALTHY, "; ".join(reasons))


def assess(gpu: GPU, scan: Scan, root: Path) -> Verdict:
    """Healthy when bound to vfio-pci with a usable /dev/vfio/<group>; else every reason."""
    f = gpu.function
    reasons = list(f.problems)
    if f.driver == "":
        reasons.append("bound to no driver; it must be bound to vfio-pci to reach a VM")
    elif f.driver != VFIO_DRIVER:
        reasons.append(
            f"bound to the {f.driver} driver instead of vfio-pci, so the host owns it and "
            "it cannot be passed through to a VM"
        )
    if f.iommu_group is None:
        reasons.append(
            "has no IOMMU group: the IOMMU is off (boot with intel_iommu=on or amd_iommu=on)"
        )
    else:
        dev = root / "dev" / "vfio" / str(f.iommu_group)
        if not dev.exists():
            reasons.append(
                f"/dev/vfio/{f.iommu_group} does not exist, so no VM can open its IOMMU group"
            )
        for peer in sorted(scan.functions.values(), key=lambda p: p.address):
            if (
                peer.address != f.address
                and peer.iommu_group == f.iommu_group
                and not peer.is_bridge
                and peer.driver not in GROUP_SAFE_DRIVERS
            ):
                reasons.append(
                    f"IOMMU group {f.iommu_group} also holds {peer.address}, bound to "
                    f"{peer.driver}: every device of the group must be bound to vfio-pci"
                )
    if f.sriov_numvfs > 0:
        vfs = f"{f.sriov_numvfs} virtual function{'s' if f.sriov_numvfs > 1 else ''}"
        reasons.append(
            f"SR-IOV is on with {vfs}: a whole GPU is passed through only with sriov_numvfs 0"
        )
    return Verdict.of(reasons)
