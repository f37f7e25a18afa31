"""bench's virt-handler on a deletion: a VMI being deleted ends (Succeeded if it ran,
Failed if not) keeping its earlier phase stamps, and only VMIs being deleted end."""

from __future__ import annotations

from typing import Any, cast

from gpu_binder.bench import kubevirt
from gpu_binder.kube import KubeClient

STAMP = {"phase": "Running", "phaseTransitionTimestamp": "2026-12-02T10:00:00Z"}


def vmi(name: str, phase: str, deleting: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T11:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "phaseTransitionTimestamps": [STAMP]}}


class ApiServer:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.patches: dict[str, dict[str, Any]] = {}

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        if method == "GET":
            return {"items": self.items}
        self.patches[path.rsplit("/", 1)[1]] = body
        return body


async def ended(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    server = ApiServer(items)
    await kubevirt.shut_down(cast(KubeClient, server), "bench")
    return server.patches


async def test_a_running_vmi_being_deleted_is_reported_succeeded_after_its_stamps() -> None:
    patch = (await ended([vmi("a", "Running", deleting=True)]))["a"]["status"]
    assert patch["phase"] == "Succeeded"
    assert [s["phase"] for s in patch["phaseTransitionTimestamps"]] == ["Running", "Succeeded"]


async def test_a_vmi_deleted_before_it_ran_is_reported_failed() -> None:
    patches = await ended([vmi("a", "Scheduling", deleting=True)])
    assert patches["a"]["status"]["phase"] == "Failed"


async def test_a_vmi_not_being_deleted_or_ended_already_is_left_alone() -> None:
    patches = await ended([vmi("a", "Running", deleting=False), vmi("b", "Failed", deleting=True)])
    assert patches == {}
