"""Slots: every GPU keeps its number for as long as it exists; a new one takes the lowest free."""

from __future__ import annotations

from gpu_binder.agent.slots import assign_slots, pci_resource_env

A, B, C, D = "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"


def test_a_fresh_node_numbers_its_gpus_in_address_order() -> None:
    assert assign_slots([C, A, B], {}) == {A: 0, B: 1, C: 2}


def test_existing_devices_keep_their_slots() -> None:
    assert assign_slots([A, B, C], {A: 2, B: 0, C: 1}) == {A: 2, B: 0, C: 1}


def test_a_new_gpu_takes_the_lowest_free_slot() -> None:
    assert assign_slots([A, B, D], {A: 0, D: 3}) == {A: 0, B: 1, D: 3}


def test_a_vanished_gpus_object_still_holds_its_slot() -> None:
    # B is gone from the bus but its GPUDevice is still there: a VM may name slot 1.
    assert assign_slots([A, C], {A: 0, B: 1}) == {A: 0, C: 2}


def test_a_slot_claimed_twice_stays_with_the_lower_address() -> None:
    assert assign_slots([A, B], {A: 0, B: 0}) == {A: 0, B: 1}


def test_the_pci_variable_is_named_as_kubevirt_names_it() -> None:
    # KubeVirt upper-cases the name and turns / and . into _; dashes stay.
    assert pci_resource_env("gpu.cozystack.io/10de-2330-s3") == (
        "PCI_RESOURCE_GPU_COZYSTACK_IO_10DE-2330-S3"
    )
