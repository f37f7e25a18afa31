"""A class whose GPUs the KubeVirt CR has virt-handler serve a second time is not served:
the webhook admits none of its VMIs (binder.kubevirtcr)."""

from __future__ import annotations

from gpu_binder.api.kinds import KubeVirt

from .webhook_cluster import Cluster, review, vmi_of

POOL = {"pciVendorSelector": "10DE:2330", "resourceName": "nvidia.com/H100_POOL"}


def served_twice(cluster: Cluster) -> None:
    config = {"permittedHostDevices": {"pciHostDevices": [POOL]}}
    cluster.client.put(
        KubeVirt.from_dict(
            {
                "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                "spec": {"configuration": config},
            }
        )
    )


async def test_a_vmi_of_a_class_served_twice_is_denied_with_the_reason(cluster: Cluster) -> None:
    served_twice(cluster)
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 3, vm=vm)
    response = await cluster.admitter().admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    assert "nvidia.com/H100_POOL" in response["response"]["status"]["message"]
    assert await cluster.requests_left() == []


async def test_a_vmi_of_another_class_is_admitted_as_before(cluster: Cluster) -> None:
    served_twice(cluster)
    vm = cluster.vm("vm1", {"l40s": 1})
    cluster.gpu("node-a", 3, cls="l40s", vm=vm)
    response = await cluster.admitter().admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is True
