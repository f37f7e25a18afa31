"""The slot resource name: formatted, parsed and recognised by one rule."""

from __future__ import annotations

from gpu_binder.api.slots import Slot, device_slot, format_slot, is_slot, parse_slot
from gpu_binder.sim.builders import gpu_device


def test_the_slot_resource_is_vendor_device_and_slot() -> None:
    assert format_slot("0x10de", "0x2330", 3) == "gpu.cozystack.io/10de-2330-s3"


def test_a_slot_resource_parses_back_into_its_parts() -> None:
    assert parse_slot("gpu.cozystack.io/10de-2330-s3") == Slot("10de", "2330", 3)


def test_a_class_resource_name_is_no_slot() -> None:
    assert parse_slot("nvidia.com/H100") is None
    assert not is_slot("gpu.cozystack.io/10de-2330")


def test_a_device_without_a_slot_is_served_under_no_slot_resource() -> None:
    d = gpu_device("n1", 2)
    unslotted = d.model_copy(update={"spec": d.spec.model_copy(update={"slot": None})})
    assert device_slot(unslotted) == ""
    assert device_slot(d) == format_slot(d.spec.vendor_id, d.spec.device_id, 2)
