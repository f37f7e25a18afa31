"""Pod admission on the embedded cluster: the pod webhook is called where it exists, its
JSONPatch applied, its denial passed on; without it pods go as KubeVirt rendered them."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from gpu_binder.sim import admission
from gpu_binder.sim.admission import POD_WEBHOOK_MODULE, call_pod_webhook, pod_pinner
from gpu_binder.sim.catalog import H100
from gpu_binder.sim.cluster import ClassDef, Cluster
from gpu_binder.sim.launcher import render_launcher_pod
from gpu_binder.webhook.review import allowed, denied, parse_review

from .kubevirt_world import SLOT0


def pod() -> dict[str, Any]:
    vmi = {
        "metadata": {"name": "vm1", "namespace": "t", "uid": "u1"},
        "spec": {"domain": {"devices": {"gpus": [{"name": "g", "deviceName": SLOT0}]}}},
    }
    return render_launcher_pod(vmi)


class Pinner:
    """A stand-in with the pod webhook's interface: PodPinner(world, config, clock)."""

    def __init__(self, world: Any, config: Any, clock: Any) -> None:
        self.seen: list[dict[str, Any]] = []
        self.deny = ""

    def decide(self, review: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(review)
        request = parse_review(review)
        if self.deny:
            return denied(request.uid, self.deny)
        op = {"op": "add", "path": "/spec/nodeName", "value": "n1"}
        return allowed(request.uid, [op])


@pytest.fixture
def pods_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType(POD_WEBHOOK_MODULE)
    module.PodPinner = Pinner  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, POD_WEBHOOK_MODULE, module)
    return module


def test_the_pod_webhook_gets_a_review_of_a_pod_create() -> None:
    pinner = Pinner(None, None, None)
    call_pod_webhook(pinner, pod())
    request = parse_review(pinner.seen[0])
    assert (request.kind, request.operation, request.namespace) == ("Pod", "CREATE", "t")


def test_the_pod_is_created_as_the_webhooks_patch_makes_it() -> None:
    admitted = call_pod_webhook(Pinner(None, None, None), pod())
    assert isinstance(admitted, dict) and admitted["spec"]["nodeName"] == "n1"


def test_a_denial_is_passed_on_as_its_message() -> None:
    pinner = Pinner(None, None, None)
    pinner.deny = "slot s0 is not of the set of t/vm1"
    assert call_pod_webhook(pinner, pod()) == "slot s0 is not of the set of t/vm1"


def test_the_pod_webhook_is_used_where_its_module_exists(pods_module: types.ModuleType) -> None:
    assert isinstance(pod_pinner(None, None, None), Pinner)


def test_without_the_pod_webhook_module_there_is_no_pinner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(admission.importlib, "import_module", missing)
    assert pod_pinner(None, None, None) is None


async def test_the_cluster_admits_pods_through_the_pod_webhook_where_it_exists(
    pods_module: types.ModuleType,
) -> None:
    c = Cluster([ClassDef("h100", "nvidia.com/H100", H100)])
    admitted = await c.admit_pod(pod())
    assert isinstance(admitted, dict) and admitted["spec"]["nodeName"] == "n1"
