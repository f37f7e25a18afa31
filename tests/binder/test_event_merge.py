"""Merging a pass's notes: the binds or releases of one decision are one Event, told
apart by their facts, never by their words."""

from __future__ import annotations

from gpu_binder.binder.events import merge
from gpu_binder.binder.plan import Decision, Note


def _bound(device: str, node: str = "node-a", why: str = "placed") -> Note:
    decision = Decision("bound", (device,), node, why)
    return Note("VirtualMachine", "tenant", "vm", "u", "GPUOrder", "", decision=decision)


def test_the_binds_of_one_decision_are_one_event_naming_every_device() -> None:
    [note] = merge([_bound("d1"), _bound("d2")])
    assert note.message == "bound 2 GPUs (d1, d2) on node-a: placed"


def test_binds_on_two_nodes_are_two_events() -> None:
    notes = merge([_bound("d1"), _bound("d2", node="node-b")])
    assert [n.message for n in notes] == [
        "bound d1 on node-a: placed",
        "bound d2 on node-b: placed",
    ]


def test_a_note_worded_like_a_bind_is_no_bind() -> None:
    worded = Note("VirtualMachine", "tenant", "vm", "u", "GPUOrder", "bound d9 on node-a: placed")
    notes = merge([_bound("d1"), worded])
    assert [n.message for n in notes] == ["bound d1 on node-a: placed", worded.message]
