"""The pods KubeVirt renders for a VMI: the virt-launcher pod and the WaitForFirstConsumer
temporary pod, as the API server receives them at CREATE (named by generateName after
admission: `name_pod`).

Follows kubevirt/kubevirt `pkg/virt-controller/services/template.go`,
`renderLaunchManifest` (the temporary pod is the same manifest with `tempPod` set, called
through `RenderLaunchManifestNoVm` from `pkg/virt-controller/watch/vmi/lifecycle.go` while a
DataVolume waits for its first consumer):
- labels: the VMI's, plus `kubevirt.io=virt-launcher` and `kubevirt.io/created-by=<VMI
  uid>` (`podLabels`); annotations: the VMI's but kubectl's and the observed-API ones
  (`filterVMIAnnotationsForPod`), `kubevirt.io/domain`, and for the temporary pod
  `kubevirt.io/ephemeral-provisioning` (`generatePodAnnotations`);
- owned by the VMI (a controller reference);
- the compute container first: one unit of `devices.kubevirt.io/kvm`, `tun` and
  `vhost-net` (`getRequiredResources`, for a VMI on the pod network) and one unit per
  `gpus[]` / `hostDevices[]` entry of its `deviceName`, DRA entries (`claimRequest`) aside
  (`renderresources.go` `WithGPUsDevicePlugins`, `WithHostDevicesDevicePlugins`,
  `requestResource`); the VMI's own `spec.domain.resources` entries are copied over the
  computed ones (`ResourceRenderer.Limits` / `Requests`: `copyResources` of vmLimits after
  calculatedLimits), so an explicit entry for a device name replaces its count;
- the VMI's affinity copied as it is at render time, then (`setNodeAffinityForPod`) a
  `DoesNotExist` requirement on `node-labeller.kubevirt.io/obsolete-host-model` ANDed into
  every required term when the CPU model is unset or host-model (KubeVirt's default), and
  one per forbidden CPU feature (`modifyNodeAffintyToRejectLabel`): a launcher pod mostly
  has a required term of KubeVirt's own even when its VMI has no affinity;
- `kubevirt.io/schedulable=true` with the VMI's node selector over it
  (`nodeselectorrenderer.go` `NewNodeSelectorRenderer`: `maps.Copy` of the VMI's last),
  its tolerations, scheduler and priority class;
- restartPolicy Never, no service-account token or service links, the readiness gate
  `kubevirt.io/virtual-machine-unpaused` (`readinessGates`);
- terminationGracePeriodSeconds: the VMI's (default 30, `v1.DefaultGracePeriodSeconds`)
  padded twice by 15 s (`gracePeriodKillAfter`).

A stand-in of what gpu-binder's pod webhook and the embedded cluster need: CPU and memory
requests (sim nodes serve none), volumes, probes, sidecars and security contexts are left
out. One renderer serves the webhook tests, the real API server tier and the embedded
cluster.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

from gpu_binder.api.kubevirt import KUBEVIRT_API_VERSION
from gpu_binder.api.pod import APP_LABEL, CREATED_BY_LABEL, LAUNCHER, VMI_KIND

DOMAIN_ANNOTATION = "kubevirt.io/domain"
EPHEMERAL_ANNOTATION = "kubevirt.io/ephemeral-provisioning"
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"  # the label virt-handler keeps on its node
VM_NAME_LABEL = "vm.kubevirt.io/name"
HOST_MODEL_OBSOLETE = "node-labeller.kubevirt.io/obsolete-host-model"
CPU_FEATURE_LABEL = "cpu-feature.node.kubevirt.io/"
COMPUTE = "compute"
UNPAUSED_GATE = "kubevirt.io/virtual-machine-unpaused"  # v1.VirtualMachineUnpaused
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# What every VMI on the pod network gets besides its own resources (getRequiredResources);
# virt-handler's permanent device plugins serve them on every node (device_controller.go,
# PermanentHostDevicePlugins).
VIRTUALIZATION_DEVICES = (
    "devices.kubevirt.io/kvm",
    "devices.kubevirt.io/tun",
    "devices.kubevirt.io/vhost-net",
)
_NOT_COPIED = ("kubectl.kubernetes.io", "kubevirt.io/storage-observed-api-version")
_NOT_COPIED_TOO = "kubevirt.io/latest-observed-api-version"
# metav1 default of a VMI's terminationGracePeriodSeconds, and KubeVirt's padding.
_DEFAULT_GRACE = 30
_GRACE_PADDING = 15
# The characters and length of the suffix the API server gives a generateName
# (k8s.io/apimachinery/pkg/util/rand.String: no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5


def render_launcher_pod(vmi_raw: dict[str, Any], *, temp: bool = False) -> dict[str, Any]:
    """The pod virt-controller creates for the VMI (temp: the WaitForFirstConsumer one)."""
    meta = vmi_raw.get("metadata") or {}
    spec = vmi_raw.get("spec") or {}
    name = str(meta.get("name", ""))
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(_NOT_COPIED) and not k.startswith(_NOT_COPIED_TOO)
    }
    annotations[DOMAIN_ANNOTATION] = name
    annotations["kubectl.kubernetes.io/default-container"] = COMPUTE
    if temp:
        annotations[EPHEMERAL_ANNOTATION] = "true"
    labels = {
        **(meta.get("labels") or {}),
        APP_LABEL: LAUNCHER,
        CREATED_BY_LABEL: str(meta.get("uid", "")),
        # dns.SanitizeHostname: spec.hostname, else the name up to its first dot.
        VM_NAME_LABEL: str(spec.get("hostname") or name.split(".")[0])[:63],
    }
    grace = spec.get("terminationGracePeriodSeconds")
    grace = grace if isinstance(grace, int) else _DEFAULT_GRACE
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # No service-account token and no service links unless a volume asks
        # (renderLaunchManifest); virt-handler reports the guest unpaused through the gate.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "readinessGates": [{"conditionType": UNPAUSED_GATE}],
        "containers": [_compute(spec, temp)],
        "terminationGracePeriodSeconds": grace + 2 * _GRACE_PADDING,
        "nodeSelector": {SCHEDULABLE_LABEL: "true", **(spec.get("nodeSelector") or {})},
    }
    for field in ("affinity", "tolerations", "schedulerName", "priorityClassName"):
        if spec.get(field):
            pod_spec[field] = copy.deepcopy(spec[field])
    for label in _rejected_labels(spec):
        pod_spec["affinity"] = _reject(pod_spec.get("affinity"), label)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{name}-",
            "namespace": meta.get("namespace", ""),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": KUBEVIRT_API_VERSION,
                    "kind": VMI_KIND,
                    "name": name,
                    "uid": str(meta.get("uid", "")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


def name_pod(pod_raw: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The pod named from its generateName, as the API server names it once admission is
    through (its storage's BeforeCreate, after the mutating webhooks saw no name); `rng`
    draws the suffix, so a seeded run names pods alike every time."""
    meta = pod_raw.get("metadata") or {}
    if meta.get("name"):
        return pod_raw
    suffix = "".join(rng.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
    return {**pod_raw, "metadata": {**meta, "name": str(meta.get("generateName", "")) + suffix}}


def is_temp_pod(pod_raw: dict[str, Any]) -> bool:
    """A WaitForFirstConsumer temporary pod (lifecycle.go, `isTempPod`)."""
    return EPHEMERAL_ANNOTATION in ((pod_raw.get("metadata") or {}).get("annotations") or {})


def _compute(spec: dict[str, Any], temp: bool) -> dict[str, Any]:
    domain = spec.get("domain") or {}
    units: Counter[str] = Counter(VIRTUALIZATION_DEVICES)
    devices = domain.get("devices") or {}
    for section in ("gpus", "hostDevices"):
        for entry in devices.get(section) or ():
            if (
                isinstance(entry, dict)
                and entry.get("deviceName")
                and entry.get("claimRequest") is None
            ):
                units[str(entry["deviceName"])] += 1
    computed = {resource: str(n) for resource, n in units.items()}
    # The VMI's own entries are copied over the computed ones (copyResources).
    resources = domain.get("resources") or {}
    requests = {**computed, **(resources.get("requests") or {})}
    limits = {**computed, **(resources.get("limits") or {})}
    command = (
        ["/bin/bash", "-c", "echo", "bound PVCs"] if temp else ["/usr/bin/virt-launcher-monitor"]
    )
    return {
        "name": COMPUTE,
        "image": "quay.io/kubevirt/virt-launcher:stand-in",
        "command": command,
        "resources": {"requests": requests, "limits": limits},
    }


def _rejected_labels(spec: dict[str, Any]) -> list[str]:
    """Node labels the pod must not land on (setNodeAffinityForPod)."""
    cpu = (spec.get("domain") or {}).get("cpu") or {}
    out = []
    if cpu.get("model", "") in ("", "host-model"):
        out.append(HOST_MODEL_OBSOLETE)
    for feature in cpu.get("features") or ():
        if isinstance(feature, dict) and feature.get("policy") == "forbid":
            out.append(CPU_FEATURE_LABEL + str(feature.get("name", "")))
    return out


def _reject(affinity: dict[str, Any] | None, label: str) -> dict[str, Any]:
    """The affinity with `label DoesNotExist` in every required term, as
    modifyNodeAffintyToRejectLabel writes it (an empty term list stays empty)."""
    requirement = {"key": label, "operator": "DoesNotExist"}
    fresh = {_REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}
    out = copy.deepcopy(affinity) if affinity else {}
    node = out.get("nodeAffinity")
    if not isinstance(node, dict):
        out["nodeAffinity"] = fresh
        return out
    required = node.get(_REQUIRED)
    if not isinstance(required, dict):
        node[_REQUIRED] = fresh[_REQUIRED]
        return out
    for term in required.get("nodeSelectorTerms") or ():
        term["matchExpressions"] = [*(term.get("matchExpressions") or ()), requirement]
    return out
