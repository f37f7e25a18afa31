"""The launcher pod on the test node: KubeVirt's manifest (the stand-in renderer), made
runnable where virt-launcher cannot be."""

from __future__ import annotations

import copy
from typing import Any

from gpu_binder.envtest.image import TEST_IMAGE
from gpu_binder.sim.launcher import VIRTUALIZATION_DEVICES, render_launcher_pod

__all__ = ["on_test_node", "render_launcher_pod"]


def on_test_node(pod: dict[str, Any], script: str) -> dict[str, Any]:
    """The rendered pod made runnable on the test node, nothing else changed: the compute
    container is the local busybox image running script (virt-launcher cannot be built
    here), in the host's network (the test node has no pod network), without the
    devices.kubevirt.io/* units virt-launcher needs, which virt-handler's plugins serve
    and no virt-handler runs there."""
    out = copy.deepcopy(pod)
    out["spec"]["hostNetwork"] = True
    out["spec"]["terminationGracePeriodSeconds"] = 1
    compute = out["spec"]["containers"][0]
    compute["image"] = TEST_IMAGE
    compute["command"] = ["/bin/sh", "-c", script]
    for held in compute["resources"].values():
        for name in VIRTUALIZATION_DEVICES:
            held.pop(name, None)
    return out
