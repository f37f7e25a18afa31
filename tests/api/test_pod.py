"""The Pod view: what decides where a launcher pod's GPUs come from."""

from __future__ import annotations

from gpu_binder.api.pod import Pod, extended_resources


def _pod(**spec: object) -> dict[str, object]:
    return {
        "metadata": {
            "name": "virt-launcher-vm-abcde",
            "namespace": "t",
            "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "uid-1"},
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance",
                    "name": "vm",
                    "uid": "uid-1",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def test_extended_resources_sum_containers_and_skip_native_ones() -> None:
    spec = {
        "containers": [
            {
                "name": "compute",
                "resources": {
                    "limits": {
                        "cpu": "2",
                        "memory": "1Gi",
                        "hugepages-1Gi": "2Gi",
                        "devices.kubevirt.io/kvm": "1",
                        "gpu.cozystack.io/10de-2330-s3": "1",
                    }
                },
            },
            {"name": "sidecar", "resources": {"requests": {"gpu.cozystack.io/10de-2330-s4": 1}}},
        ]
    }
    assert extended_resources(spec) == {
        "devices.kubevirt.io/kvm": 1,
        "gpu.cozystack.io/10de-2330-s3": 1,
        "gpu.cozystack.io/10de-2330-s4": 1,
    }


def test_an_init_container_counts_only_beyond_the_containers() -> None:
    spec = {
        "containers": [{"resources": {"limits": {"nvidia.com/GH100": "1"}}}],
        "initContainers": [{"resources": {"limits": {"nvidia.com/GH100": "2"}}}],
    }
    assert extended_resources(spec) == {"nvidia.com/GH100": 2}


def test_a_launcher_pod_names_its_vmi_by_owner() -> None:
    pod = Pod.from_dict(_pod(containers=[], nodeName="node-a"))
    assert (pod.vmi_name, pod.vmi_uid, pod.node_name, pod.phase) == (
        "vm",
        "uid-1",
        "node-a",
        "Pending",
    )


def test_a_pod_without_a_vmi_owner_falls_back_to_the_created_by_label() -> None:
    raw = _pod(containers=[])
    raw["metadata"]["ownerReferences"] = []  # type: ignore[index]
    assert Pod.from_dict(raw).vmi_uid == "uid-1"


def test_a_pod_not_named_yet_is_read_as_admission_sees_it() -> None:
    """At CREATE a pod KubeVirt renders has generateName only: the pod webhook reads it."""
    raw = _pod(containers=[{"resources": {"limits": {"nvidia.com/GH100": "1"}}}])
    meta = raw["metadata"]
    assert isinstance(meta, dict)
    del meta["name"]
    meta["generateName"] = "virt-launcher-vm-"
    pod = Pod.from_dict(raw)
    assert (pod.metadata.name, pod.vmi_uid, pod.vmi_name) == ("", "uid-1", "vm")
    assert pod.resources == {"nvidia.com/GH100": 1}
