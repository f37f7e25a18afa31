"""The pods KubeVirt renders for a VMI: its virt-launcher pod and the WaitForFirstConsumer
temporary pod, as kubevirt/kubevirt `pkg/virt-controller/services/template.go`,
`renderLaunchManifest`, renders them.

What decides where a pod's GPUs come from is rendered as there:
- resources: one unit of each `gpus[]` / `hostDevices[]` entry's `deviceName`, as limits and
  requests of the compute container (`renderresources.go`, `WithGPUsDevicePlugins`,
  `WithHostDevicesDevicePlugins`, `requestResource`);
- placement: the VMI's `spec.affinity`, copied at render time (`pod.Spec.Affinity =
  vmi.Spec.Affinity.DeepCopy()`), with `node-labeller.kubevirt.io/obsolete-host-model
  DoesNotExist` ANDed into every required term for a host-model CPU (so every launcher pod
  has a required node affinity, `setNodeAffinityForPod`); its `nodeSelector` merged over
  `kubevirt.io/schedulable: "true"` (`nodeselectorrenderer.go`, `NewNodeSelectorRenderer`),
  its tolerations and scheduler name;
- identity: `generateName: virt-launcher-<vmi>-` (the API server appends 5 characters), the
  VMI's labels plus `kubevirt.io: virt-launcher` and `kubevirt.io/created-by: <VMI uid>`
  (`podLabels`), the VMI's annotations plus `kubevirt.io/domain` (`generatePodAnnotations`,
  `filterVMIAnnotationsForPod`), and the VMI as controller owner;
- the temporary pod (`RenderLaunchManifestNoVm`, `tempPod`): the same manifest, annotated
  `kubevirt.io/ephemeral-provisioning: "true"`, whose container only echoes and exits.

Left out, as no decision here depends on them: CPU and memory requests (sim nodes serve
no CPU or memory), KubeVirt's own device-plugin resources (`devices.kubevirt.io/kvm`,
`tun`, `vhost-net`), volumes, sidecars, security contexts.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from gpu_binder.api.kubevirt import KUBEVIRT_API_VERSION
from gpu_binder.api.pod import APP_LABEL, CREATED_BY_LABEL, LAUNCHER
from gpu_binder.sim.objects import json_copy

# staging/src/kubevirt.io/api/core/v1/types.go
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"  # the label virt-handler keeps on its node
DOMAIN_ANNOTATION = "kubevirt.io/domain"
EPHEMERAL_ANNOTATION = "kubevirt.io/ephemeral-provisioning"
VM_NAME_LABEL = "vm.kubevirt.io/name"
COMPUTE = "compute"
# A VMI whose CPU model is host-model (the default) keeps off nodes the node labeller marks
# obsolete for it (template.go, setNodeAffinityForHostModelCpuModel).
HOST_MODEL = "host-model"
OBSOLETE_HOST_MODEL_LABEL = "node-labeller.kubevirt.io/obsolete-host-model"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# The characters and length of the suffix the API server gives a generateName
# (k8s.io/apimachinery/pkg/util/rand.String: no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5
# metav1 default of a VMI's terminationGracePeriodSeconds, and KubeVirt's padding.
_DEFAULT_GRACE = 30
_GRACE_PADDING = 15

_rng = random.Random()


def device_units(vmi_spec: dict[str, Any]) -> Counter[str]:
    """Units per resource the VMI's device-plugin entries ask for (no DRA claims)."""
    devices = ((vmi_spec.get("domain") or {}).get("devices")) or {}
    units: Counter[str] = Counter()
    for section in ("gpus", "hostDevices"):
        for entry in devices.get(section) or ():
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("deviceName"), str)
                and entry["deviceName"]
                and entry.get("claimRequest") is None
            ):
                units[entry["deviceName"]] += 1
    return units


def reject_label(affinity: dict[str, Any] | None, label: str) -> dict[str, Any]:
    """The affinity with `label DoesNotExist` ANDed into every required term, or one term
    of it alone when there are none (template.go, modifyNodeAffintyToRejectLabel)."""
    requirement = {"key": label, "operator": "DoesNotExist"}
    out = dict(affinity or {})
    node = dict(out.get("nodeAffinity") or {})
    required = node.get(_REQUIRED)
    if required is not None:
        terms = [
            {**t, "matchExpressions": [*(t.get("matchExpressions") or []), requirement]}
            for t in required.get("nodeSelectorTerms") or []
        ]
        node[_REQUIRED] = {**required, "nodeSelectorTerms": terms}
    else:
        node[_REQUIRED] = {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}
    out["nodeAffinity"] = node
    return out


def is_temp_pod(pod_raw: dict[str, Any]) -> bool:
    """A WaitForFirstConsumer temporary pod (lifecycle.go, `isTempPod`)."""
    return EPHEMERAL_ANNOTATION in ((pod_raw.get("metadata") or {}).get("annotations") or {})


def render_launcher_pod(
    vmi_raw: dict[str, Any], *, temp: bool = False, rng: random.Random | None = None
) -> dict[str, Any]:
    """The pod (wire form) KubeVirt creates for the VMI: its virt-launcher pod, or with
    temp the WaitForFirstConsumer temporary pod. `rng` picks the name's suffix (the API
    server's part), so a seeded run names pods alike every time."""
    meta = vmi_raw.get("metadata") or {}
    spec = vmi_raw.get("spec") or {}
    name, namespace, uid = str(meta["name"]), str(meta.get("namespace", "")), meta.get("uid", "")
    labels = {
        **(meta.get("labels") or {}),
        APP_LABEL: LAUNCHER,
        CREATED_BY_LABEL: str(uid),
        VM_NAME_LABEL: name,
    }
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith("kubectl.kubernetes.io")
    }
    annotations[DOMAIN_ANNOTATION] = name
    if temp:
        annotations[EPHEMERAL_ANNOTATION] = "true"
    units = device_units(spec)
    quantities = {r: str(n) for r, n in sorted(units.items())}
    command = (
        ["/bin/bash", "-c", "echo", "bound PVCs"] if temp else ["/usr/bin/virt-launcher-monitor"]
    )
    compute: dict[str, Any] = {"name": COMPUTE, "command": command}
    if quantities:
        compute["resources"] = {"limits": dict(quantities), "requests": dict(quantities)}
    grace = spec.get("terminationGracePeriodSeconds")
    grace = grace if isinstance(grace, int) else _DEFAULT_GRACE
    pod_spec: dict[str, Any] = {
        "containers": [compute],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace + 2 * _GRACE_PADDING,
        "nodeSelector": {SCHEDULABLE_LABEL: "true", **(spec.get("nodeSelector") or {})},
    }
    affinity = json_copy({"a": spec.get("affinity")})["a"]
    cpu = ((spec.get("domain") or {}).get("cpu")) or {}
    if cpu.get("model", "") in ("", HOST_MODEL):
        affinity = reject_label(affinity, OBSOLETE_HOST_MODEL_LABEL)
    if affinity is not None:
        pod_spec["affinity"] = affinity
    for field in ("tolerations", "schedulerName", "priorityClassName"):
        if spec.get(field):
            pod_spec[field] = json_copy({"v": spec[field]})["v"]
    generate_name = f"virt-launcher-{name}-"
    suffix = "".join((rng or _rng).choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": generate_name + suffix,
            "generateName": generate_name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": KUBEVIRT_API_VERSION,
                    "kind": "VirtualMachineInstance",
                    "name": name,
                    "uid": str(uid),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }
