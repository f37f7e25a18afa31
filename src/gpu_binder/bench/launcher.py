"""The launcher pod for nodes that run no virt-handler: the bench's KWOK nodes and the
real-node tier's kubelet.

The manifest is KubeVirt's, from the one stand-in renderer (`gpu_binder.sim.launcher`,
which follows template.go `renderLaunchManifest`), less the units of virt-handler's own
device plugins (`devices.kubevirt.io/kvm`, `tun`, `vhost-net`): nothing serves them on
those nodes, so a pod asking for them would never schedule there. Everything that
decides which GPUs the pod gets (the slot resources, affinity, nodeSelector, owner,
labels) is as KubeVirt renders it.
"""

from __future__ import annotations

from typing import Any

from gpu_binder.sim import launcher

__all__ = ["render_launcher_pod"]


def render_launcher_pod(vmi_raw: dict[str, Any], *, temp: bool = False) -> dict[str, Any]:
    pod = launcher.render_launcher_pod(vmi_raw, temp=temp)
    resources = pod["spec"]["containers"][0]["resources"]
    for part in ("requests", "limits"):
        for name in launcher.VIRTUALIZATION_DEVICES:
            resources[part].pop(name, None)
    return pod
