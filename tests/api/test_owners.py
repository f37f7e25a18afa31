"""The owner an object belongs to: the controller owner, else the first, typed or raw."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.webhook.target import vm_owner


def _ref(name: str, *, controller: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"}
    ref.update(name=name, uid=f"uid-{name}", controller=controller)
    return ref


def _typed(refs: list[dict[str, Any]]) -> str | None:
    owner = ObjectMeta.model_validate({"name": "x", "ownerReferences": refs}).owner(
        "VirtualMachine"
    )
    return owner.name if owner is not None else None


def test_the_controller_owner_wins_over_an_earlier_one() -> None:
    refs = [_ref("a"), _ref("b", controller=True)]
    assert _typed(refs) == "b"
    assert vm_owner(refs) == ("b", "uid-b")


def test_without_a_controller_owner_the_first_is_the_owner() -> None:
    refs = [_ref("a"), _ref("b")]
    assert _typed(refs) == "a"
    assert vm_owner(refs) == ("a", "uid-a")


def test_no_owner_of_the_kind_is_none() -> None:
    assert _typed([]) is None
    assert vm_owner([]) is None
