"""The launcher pod KubeVirt's virt-controller renders for a VMI — a stand-in.

TODO(kv-sim): use ``gpu_binder.sim.launcher.render_launcher_pod`` (the shared stand-in,
written on branch kv-sim, same signature) once it is on main, and delete this module.

It follows kubevirt/kubevirt ``pkg/virt-controller/services/template.go``
``renderLaunchManifest``: generateName ``virt-launcher-<name>-``, labels from
``podLabels`` (the VMI's own, ``kubevirt.io=virt-launcher``,
``kubevirt.io/created-by=<VMI uid>``), a controller ownerReference to the VMI, the VMI's
affinity deep-copied, its tolerations and schedulerName, ``NodeSelectorRenderer``'s
``kubevirt.io/schedulable=true`` plus the VMI's nodeSelector, restartPolicy Never, no
service-account token; and ``renderresources.go`` ``WithGPUsDevicePlugins`` /
``WithHostDevicesDevicePlugins``: every ``gpus[]`` / ``hostDevices[]`` entry with a
``deviceName`` is one unit of that resource in the compute container's requests and limits.
The WaitForFirstConsumer temporary pod (``temp=True``) is the same manifest with the
``kubevirt.io/ephemeral-provisioning`` annotation (``v1.EphemeralProvisioningObject``).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

VMI_API_VERSION = "kubevirt.io/v1"
SCHEDULABLE = "kubevirt.io/schedulable"


def render_launcher_pod(vmi_raw: dict[str, Any], *, temp: bool = False) -> dict[str, Any]:
    meta = vmi_raw["metadata"]
    spec = vmi_raw.get("spec") or {}
    devices = (spec.get("domain") or {}).get("devices") or {}
    units: Counter[str] = Counter()
    for section in ("gpus", "hostDevices"):
        for entry in devices.get(section) or []:
            if entry.get("deviceName"):
                units[entry["deviceName"]] += 1
    resources = {name: str(n) for name, n in sorted(units.items())}
    labels = {
        **(meta.get("labels") or {}),
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": meta["uid"],
        "vm.kubevirt.io/name": meta["name"],
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {"kubevirt.io/domain": meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": VMI_API_VERSION,
                    "kind": "VirtualMachineInstance",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "nodeSelector": {SCHEDULABLE: "true", **(spec.get("nodeSelector") or {})},
            "readinessGates": [{"conditionType": "kubevirt.io/virtual-machine-unpaused"}],
            "containers": [
                {
                    "name": "compute",
                    "image": "virt-launcher",
                    "resources": {"requests": dict(resources), "limits": dict(resources)},
                }
            ],
        },
    }
    if temp:
        pod["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"] = "true"
    for field in ("tolerations", "schedulerName"):
        if spec.get(field):
            pod["spec"][field] = copy.deepcopy(spec[field])
    if spec.get("affinity"):
        pod["spec"]["affinity"] = copy.deepcopy(spec["affinity"])
    return pod
