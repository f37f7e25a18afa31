"""The Helm chart installed with a real `helm install` into a real API server.

What the README's install command does to a cluster: `helm install --create-namespace`
stores the release's objects and the chart's CRDs; its webhook fails closed, so a VMI
is refused while no binder answers, rather than started without its GPUs; `helm upgrade`
changes the stored objects; `helm uninstall` removes them but keeps the CRDs and the
GPUDevices in them (Helm never deletes a chart's crds/), so no inventory is lost.

The release gets a kube-apiserver + etcd of its own, not the session's: its fail-closed
webhook would refuse every VMI the other tests create. The control plane has no kubelet,
controllers or cert-manager, so no pod runs and the webhook's certificate is given as a
Secret issued by the control plane's CA. helm is found or built as for
test_helm_chart.py; without helm, Go or the control plane's binaries the tests are
skipped with one line, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import test_helm_chart
import yaml
from realcluster import DEPLOY, put, uid
from test_helm_chart import CHART

from conftest import _in_ci, _resolve
from gpu_binder.api.types import API_VERSION
from gpu_binder.envtest import ApiResponse, ControlPlane
from gpu_binder.sim import builders

# The first test may build helm (a few minutes on 2 cores) inside its timeout.
pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(1200)]

# The session's helm fixture, bound here for pytest to find it in this module too.
helm = test_helm_chart.helm

# The install command of values.yaml: release and namespace gpu-binder.
RELEASE = NAMESPACE = "gpu-binder"
SERVICE = f"{RELEASE}-webhook"
OBJECTS = {
    "Deployment": f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{RELEASE}",
    "DaemonSet": f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{RELEASE}-agent",
    "Service": f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}",
    "Secret": f"/api/v1/namespaces/{NAMESPACE}/secrets/{SERVICE}-tls",
    "MutatingWebhookConfiguration": (
        f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{RELEASE}"
    ),
}
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GPUDEVICES = f"/apis/{API_VERSION}/gpudevices"


def crd_names() -> list[str]:
    """The CRDs the chart ships in crds/."""
    return sorted(
        yaml.safe_load(f.read_text())["metadata"]["name"] for f in (CHART / "crds").glob("*.yaml")
    )


@dataclass(frozen=True)
class Release:
    cp: ControlPlane
    helm: Path
    home: Path
    values: Path
    # What `helm install` printed: the chart's NOTES.txt, rendered.
    installed: str = ""

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`helm <args>` against this module's control plane, in the release's namespace."""
        # Only PATH and a HOME of its own, where helm caches the API server's discovery (with
        # no HOME at all it would write .kube/ into the working directory).
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.home)}
        kube = ("--namespace", NAMESPACE, "--kubeconfig", str(self.cp.kubeconfig))
        done = subprocess.run(
            [str(self.helm), *args, *kube],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def get(self, path: str) -> ApiResponse:
        return self.cp.request("GET", path)

    def stored(self, path: str) -> dict[str, Any]:
        answer = self.get(path)
        assert answer.ok, answer.body
        found: dict[str, Any] = answer.json()
        return found


@pytest.fixture(scope="module")
def release(
    helm: Path, pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    """The chart installed once, by `helm install`, into a control plane of this module."""
    assets = _resolve(pytestconfig)
    if isinstance(assets, str):
        if _in_ci() or assets.startswith("building"):
            pytest.fail(assets.replace("skipped", "cannot run (CI=true)"), pytrace=False)
        pytest.skip(assets)
    # Service IPs on loopback: the API server's call to the webhook's Service is refused
    # at once on any machine, instead of going to whatever answers at 10.0.0.x.
    flags = {"service-cluster-ip-range": "127.0.0.0/24"}
    with ControlPlane(assets, apiserver_flags=flags) as cp:
        cp.install_crds([DEPLOY / "kubevirt" / "crds.yaml"])
        pair = cp.certs.ca.issue_serving(SERVICE, hosts=[f"{SERVICE}.{NAMESPACE}.svc"])
        values = {
            "webhook": {
                "certificateSource": "secret",
                "secret": {
                    "tlsCrt": pair.cert_pem.decode(),
                    "tlsKey": pair.key_pem.decode(),
                    "caBundle": cp.ca_pem.decode(),
                },
                # The CA of the webhook client certificate this control plane's API
                # server presents.
                "clientAuth": {"caBundle": cp.webhook_client.ca.cert_pem.decode()},
            },
            "serviceMonitor": {"enabled": False},
        }
        home = tmp_path_factory.mktemp("helm-home")
        file = home / "values.yaml"
        file.write_text(yaml.safe_dump(values))
        release = Release(cp, helm, home, file)
        done = release.run(
            "install", RELEASE, str(CHART), "--create-namespace", "--values", str(file)
        )
        yield Release(cp, helm, home, file, installed=done.stdout)


# The tests share the one release, in file order: the uninstall comes last.


def test_helm_install_stores_the_releases_objects_and_establishes_the_crds(
    release: Release,
) -> None:
    status = json.loads(release.run("status", RELEASE, "--output", "json").stdout)
    assert status["info"]["status"] == "deployed"
    for kind, path in OBJECTS.items():
        annotations = release.stored(path)["metadata"].get("annotations") or {}
        assert annotations.get("meta.helm.sh/release-name") == RELEASE, kind
        assert annotations.get("meta.helm.sh/release-namespace") == NAMESPACE, kind
    for name in crd_names():
        conditions = release.stored(f"{CRDS}/{name}")["status"]["conditions"]
        assert {c["type"]: c["status"] for c in conditions}.get("Established") == "True", name


def test_helm_install_prints_what_to_do_next(release: Release) -> None:
    notes = release.installed.partition("NOTES:")[2]
    assert "kubectl label node <node> gpu.cozystack.io/agent=true" in notes
    assert "kubectl apply -f examples/gpuclass-h100-sxm.yaml" in notes
    assert f"helm test {RELEASE} -n {NAMESPACE}" in notes
    assert "kubectl gpu status" in notes
    assert "--set prometheusRule.enabled=true" in notes
    assert "helm never upgrades CRDs" in notes


def test_a_vmi_asking_for_a_gpu_is_refused_while_no_binder_answers_the_webhook(
    release: Release,
) -> None:
    cp = release.cp
    # No kubelet: no binder pod runs, so the webhook's Service has no one behind it.
    assert release.stored(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"] == []
    hooks = release.stored(OBJECTS["MutatingWebhookConfiguration"])["webhooks"]
    assert [h["failurePolicy"] for h in hooks] == ["Fail", "Fail"]
    tenant = f"tenant-{uid()}"
    put(cp, {"kind": "Namespace", "metadata": {"name": tenant}})
    vmis = f"/apis/kubevirt.io/v1/namespaces/{tenant}/virtualmachineinstances"

    refused = cp.request("POST", vmis, builders.vmi_object("vm", tenant, ["example.com/H100"]))

    assert refused.status == 500, refused.body
    answer = refused.json()
    assert answer["reason"] == "InternalError"
    # The API server's words; the webhook's name and Service say whose it is.
    assert 'failed calling webhook "vmi.gpu-binder.cozystack.io"' in answer["message"]
    assert 'Post "https://gpu-binder-webhook.gpu-binder.svc:443/mutate' in answer["message"]
    assert release.get(f"{vmis}/vm").status == 404


def test_helm_upgrade_with_other_values_changes_the_stored_deployment(
    release: Release,
) -> None:
    assert release.stored(OBJECTS["Deployment"])["spec"]["replicas"] == 2

    values = ("--values", str(release.values), "--set", "binder.replicas=3")
    release.run("upgrade", RELEASE, str(CHART), *values)

    assert release.stored(OBJECTS["Deployment"])["spec"]["replicas"] == 3
    status = json.loads(release.run("status", RELEASE, "--output", "json").stdout)
    assert (status["info"]["status"], status["version"]) == ("deployed", 2)


def test_helm_uninstall_removes_the_releases_objects_but_keeps_the_crds_and_gpudevices(
    release: Release,
) -> None:
    device = builders.gpu_device(f"node-{uid()}", 0).to_dict()
    device.pop("status")
    created = release.cp.request("POST", GPUDEVICES, device)
    assert created.ok, created.body
    name = device["metadata"]["name"]

    release.run("uninstall", RELEASE)

    gone = {kind: release.get(path).status for kind, path in OBJECTS.items()}
    assert gone == dict.fromkeys(OBJECTS, 404)
    for crd in crd_names():
        assert release.get(f"{CRDS}/{crd}").ok, crd
    assert release.stored(f"{GPUDEVICES}/{name}")["spec"]["nodeName"] == device["spec"]["nodeName"]
