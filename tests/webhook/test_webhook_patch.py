"""The JSONPatch of an admitted VMI: slot resources, the node ANDed in, the devices named,
the usage finalizer added."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.types import USAGE_FINALIZER
from gpu_binder.sim.jsonpatch import apply_patch
from gpu_binder.webhook.patch import affinity_ops, pin_patch, pointer
from gpu_binder.webhook.pinning import Entry, Pinning

NODE_ONLY = {"key": "metadata.name", "operator": "In", "values": ["node-b"]}
SLOT = "gpu.cozystack.io/10de-2330-s3"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def vmi(**spec: Any) -> dict[str, Any]:
    gpus = [{"name": "gpu0", "deviceName": "nvidia.com/H100"}]
    return {
        "metadata": {"name": "vm1", "namespace": "t"},
        "spec": {"domain": {"devices": {"gpus": gpus}}, **spec},
    }


def pinned(doc: dict[str, Any]) -> dict[str, Any]:
    pinning = Pinning("node-b", ("node-b-0000-13-00-0",), ((Entry("gpus", 0, "x"), SLOT),))
    return apply_patch(doc, pin_patch(doc, pinning))


def terms(doc: dict[str, Any]) -> Any:
    required = doc["spec"]["affinity"]["nodeAffinity"]
    return required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_a_gpu_entry_is_rewritten_to_its_slot_resource() -> None:
    assert pinned(vmi())["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu0", "deviceName": SLOT}
    ]


def test_a_vmi_without_affinity_gets_one_term_requiring_the_node() -> None:
    assert terms(pinned(vmi())) == [{"matchFields": [NODE_ONLY]}]


def test_other_affinities_are_kept_when_node_affinity_is_added() -> None:
    pod_affinity: dict[str, Any] = {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}
    }
    out = pinned(vmi(affinity=dict(pod_affinity)))
    assert out["spec"]["affinity"]["podAntiAffinity"] == pod_affinity["podAntiAffinity"]
    assert terms(out) == [{"matchFields": [NODE_ONLY]}]


def test_preferred_node_affinity_is_kept_when_a_required_one_is_added() -> None:
    preferred = [{"weight": 1, "preference": {"matchExpressions": []}}]
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    out = pinned(vmi(affinity=affinity))
    node_affinity = out["spec"]["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert terms(out) == [{"matchFields": [NODE_ONLY]}]


def test_a_term_with_match_fields_keeps_them_and_gains_the_node() -> None:
    zone = {"key": "metadata.name", "operator": "NotIn", "values": ["node-x"]}
    required = {"nodeSelectorTerms": [{"matchFields": [zone]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    assert terms(pinned(vmi(affinity=affinity))) == [{"matchFields": [zone, NODE_ONLY]}]


def test_an_empty_term_list_gets_one_term_requiring_the_node() -> None:
    required: dict[str, Any] = {"nodeSelectorTerms": []}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    assert terms(pinned(vmi(affinity=affinity))) == [{"matchFields": [NODE_ONLY]}]


def test_the_devices_annotation_is_added_next_to_existing_annotations() -> None:
    doc = vmi()
    doc["metadata"]["annotations"] = {"team": "ml"}
    assert pinned(doc)["metadata"]["annotations"] == {
        "team": "ml",
        "gpu.cozystack.io/devices": "node-b-0000-13-00-0",
    }


def test_the_annotations_map_is_created_when_the_vmi_has_none() -> None:
    assert pinned(vmi())["metadata"]["annotations"] == {
        "gpu.cozystack.io/devices": "node-b-0000-13-00-0"
    }


def test_the_annotation_key_is_escaped_in_the_pointer() -> None:
    doc = vmi()
    doc["metadata"]["annotations"] = {}
    paths = [
        op["path"]
        for op in pin_patch(doc, Pinning("node-b", ("d",), ()))
        if op["path"].startswith("/metadata/annotations")
    ]
    assert paths == ["/metadata/annotations/gpu.cozystack.io~1devices"]


def test_the_usage_finalizer_is_added_to_a_vmi_without_finalizers() -> None:
    assert pinned(vmi())["metadata"]["finalizers"] == [USAGE_FINALIZER]


def test_the_usage_finalizer_is_added_after_the_finalizers_the_vmi_has() -> None:
    doc = vmi()
    doc["metadata"]["finalizers"] = ["kubevirt.io/foregroundDeleteVirtualMachine"]
    assert pinned(doc)["metadata"]["finalizers"] == [
        "kubevirt.io/foregroundDeleteVirtualMachine",
        USAGE_FINALIZER,
    ]


def test_a_vmi_holding_the_usage_finalizer_already_gets_it_once() -> None:
    doc = vmi()
    doc["metadata"]["finalizers"] = [USAGE_FINALIZER]
    assert pinned(doc)["metadata"]["finalizers"] == [USAGE_FINALIZER]


def test_a_vmi_without_metadata_gets_the_annotation_and_the_finalizer() -> None:
    doc = vmi()
    del doc["metadata"]
    out = pinned(doc)["metadata"]
    assert out == {
        "annotations": {"gpu.cozystack.io/devices": "node-b-0000-13-00-0"},
        "finalizers": [USAGE_FINALIZER],
    }


def test_pointer_tokens_escape_tilde_and_slash() -> None:
    assert pointer("a/b", "c~d", 0) == "/a~1b/c~0d/0"


def test_a_term_that_requires_the_node_already_is_left_as_it_is() -> None:
    """The pod webhook runs again when a later webhook changed the pod (reinvocation), and
    KubeVirt may have copied the VMI's pin into the pod: the node is required once."""
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    required = {"nodeSelectorTerms": [{"matchFields": [NODE_ONLY]}, {"matchExpressions": [zone]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    assert terms(pinned(vmi(affinity=affinity))) == [
        {"matchFields": [NODE_ONLY]},
        {"matchExpressions": [zone], "matchFields": [NODE_ONLY]},
    ]


def test_affinity_that_pins_every_term_already_needs_no_op() -> None:
    required = {"nodeSelectorTerms": [{"matchFields": [NODE_ONLY]}]}
    doc = {"spec": {"affinity": {"nodeAffinity": {_REQUIRED: required}}}}
    assert affinity_ops(doc, "node-b") == []
