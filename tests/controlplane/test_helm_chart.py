"""The Helm chart (deploy/helm/gpu-binder) with a real helm and a real API server.

helm is found or built once per machine by gpu_binder.envtest.helm (`go install` from
the Go module proxy into ~/.cache/gpu-binder/helm/<version>/); the first test to need it
builds it, under a timeout long enough for that. Without helm and Go the tests are
skipped with one line saying how to enable them, except under CI=true, where they fail.

Rendered with its defaults the chart makes the objects of deploy/binder and deploy/agent
(which the other tests of this directory run the binder and the agent under); rendered
with other values it changes what they say and nothing else; every rendered object is
accepted by the API server (server-side apply, dry run), as `kubectl apply --server-side
--dry-run=server` would.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from realcluster import DEPLOY, put, uid

from gpu_binder.binder import Config
from gpu_binder.envtest import AssetsBuildError, AssetsUnavailable, ControlPlane
from gpu_binder.envtest.helm import ensure_helm

# The first test may build helm (a few minutes on 2 cores) inside its timeout.
pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(1200)]

CHART = DEPLOY / "helm" / "gpu-binder"
APPLY = "application/apply-patch+yaml"
# The chart's default ledger namespace (ledger.namespace), the binder's default too.
LEDGER_NAMESPACE = Config().ledger_namespace
# Labels only the chart sets (deploy/ has no release): left out of the comparison.
RELEASE_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
}
# Objects deploy/ leaves to the cluster's admin: the cert-manager Certificate (and its
# self-signed Issuer) and the dashboard.
CHART_ONLY = {"Certificate", "Issuer", "ConfigMap"}


@pytest.fixture(scope="session")
def helm(pytestconfig: pytest.Config) -> Path:
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def progress(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    try:
        return ensure_helm(progress=progress)
    except AssetsUnavailable as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"helm tests cannot run (CI=true): {e}", pytrace=False)
        pytest.skip(f"helm tests skipped: {e}")
    except AssetsBuildError as e:
        pytest.fail(f"building helm failed: {e}", pytrace=False)


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A HOME of its own: no repositories, plugins or cache of the person running the tests.
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HELM_CACHE_HOME": "/nonexistent/cache",
        "HELM_CONFIG_HOME": "/nonexistent/config",
        "HELM_DATA_HOME": "/nonexistent/data",
    }
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def render(
    helm: Path,
    release: str = "gpu-binder",
    namespace: str = "gpu-binder",
    values: dict[str, Any] | None = None,
    tmp: Path | None = None,
    flags: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """`helm template`'s documents, with values written to a file under tmp."""
    args = ["template", release, str(CHART), "--namespace", namespace, *flags]
    if values is not None:
        assert tmp is not None
        file = tmp / f"values-{uid()}.yaml"
        file.write_text(yaml.safe_dump(values))
        args += ["--values", str(file)]
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def deploy_docs() -> list[dict[str, Any]]:
    files = [f for d in ("binder", "agent", "ledger") for f in sorted((DEPLOY / d).glob("*.yaml"))]
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    # The chart installs into the release's namespace (helm install --create-namespace);
    # the ledger's namespace it makes itself.
    release = [d for d in docs if (d["kind"], d["metadata"]["name"]) == ("Namespace", "gpu-binder")]
    return list(by_key([d for d in docs if d not in release]).values())


def normalized(doc: dict[str, Any]) -> dict[str, Any]:
    """doc without what only a Helm release adds; env lists in name order."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: strip(v) for k, v in value.items() if k not in RELEASE_LABELS}
            if isinstance(out.get("env"), list):
                out["env"] = sorted(out["env"], key=lambda e: e["name"])
            out.pop("imagePullPolicy", None)
            return out
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    out: dict[str, Any] = strip(doc)
    out["metadata"].pop("labels", None)
    return out


def labels(doc: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = doc["metadata"].get("labels") or {}
    return found


# --- lint and template ------------------------------------------------------------------


def test_the_chart_lints_clean_with_its_defaults_and_other_values(
    helm: Path, tmp_path: Path
) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(other_values(certs_of(None))))
    done = run_helm(helm, "lint", "--strict", str(CHART), "--values", str(file))
    assert done.returncode == 0, done.stdout + done.stderr


def test_its_defaults_render_the_objects_of_deploy(helm: Path) -> None:
    # `helm test`'s objects (templates/tests) are hooks, not part of the installed release.
    chart = by_key(render(helm, flags=("--skip-tests",)))
    deploy = by_key(deploy_docs())
    assert {k for k in chart if k[0] not in CHART_ONLY} == set(deploy)
    for key, want in deploy.items():
        got = chart[key]
        # Every label deploy/ sets (the tenant role's aggregation, the component) is there.
        assert labels(want).items() <= labels(got).items(), key
        assert normalized(got) == normalized(want), key
    # What the chart adds: cert-manager's Certificate for the webhook Service's DNS name,
    # its self-signed Issuer, and the dashboard.
    cert = chart[("Certificate", "gpu-binder-webhook-tls")]
    assert cert["spec"]["secretName"] == "gpu-binder-webhook-tls"
    assert "gpu-binder-webhook.gpu-binder.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"] == {
        "kind": "Issuer",
        "name": "gpu-binder-selfsigned",
        "group": "cert-manager.io",
    }
    assert chart[("Issuer", "gpu-binder-selfsigned")]["spec"] == {"selfSigned": {}}
    dashboard = chart[("ConfigMap", "gpu-binder-dashboard")]
    assert labels(dashboard)["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpu-binder.json"]) == json.loads(
        (CHART / "files" / "dashboard.json").read_text()
    )


def test_the_crds_it_installs_are_deploys(helm: Path) -> None:
    docs = render(helm, flags=("--include-crds",))
    crds = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    want = {
        d["metadata"]["name"]: d
        for f in sorted((DEPLOY / "crds").glob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
    }
    assert crds == want


class Certs:
    def __init__(self, crt: str, key: str, ca: str) -> None:
        self.crt, self.key, self.ca = crt, key, ca


def certs_of(cp: ControlPlane | None) -> Certs:
    """A serving certificate of the webhook Service of release gb in gpu-system."""
    if cp is None:
        return Certs("-----BEGIN CERTIFICATE-----\nx\n", "-----BEGIN KEY-----\nx\n", "ca")
    pair = cp.certs.ca.issue_serving("gb-webhook", hosts=["gb-webhook.gpu-system.svc"])
    return Certs(pair.cert_pem.decode(), pair.key_pem.decode(), cp.ca_pem.decode())


def other_values(
    certs: Certs, monitoring: str = "monitoring", fullname: str = "gb"
) -> dict[str, Any]:
    return {
        "fullnameOverride": fullname,
        "image": {"repository": "registry.example/gpu-binder", "tag": "9.9.9"},
        "imagePullSecrets": [{"name": "regcred"}],
        "commonLabels": {"team": "gpu"},
        "binder": {
            "replicas": 3,
            "config": {"resync": "1m", "logFormat": "text", "lostGrace": "10m"},
            "extraArgs": ["--log-level=debug"],
            "podDisruptionBudget": {"enabled": True},
        },
        "webhook": {
            "failurePolicy": "Ignore",
            "timeoutSeconds": 15,
            "excludedNamespaces": ["tenant-system"],
            "certificateSource": "secret",
            "secret": {"tlsCrt": certs.crt, "tlsKey": certs.key, "caBundle": certs.ca},
            "clientAuth": {"caBundle": certs.ca, "names": ["apiserver-a", "apiserver-b"]},
        },
        "agent": {
            "devicePlugin": {"enabled": False},
            "interval": "30s",
            "resync": "10m",
            "vendors": ["0x10de", "0x1002"],
            "nodeSelector": None,
            "vfioBinding": {"enabled": True},
        },
        "slotResourcePolicy": {"kubevirtNamespace": "cozy-kubevirt"},
        "rbac": {"tenantRole": False},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "prometheusRule": {
            "enabled": True,
            "labels": {"release": "prometheus"},
            "namespace": monitoring,
            "alertLabels": {"team": "gpu"},
        },
        "tests": {"namespace": "tenant-a"},
        "dashboard": {"namespace": monitoring},
    }


def test_other_values_change_what_they_say(helm: Path, tmp_path: Path) -> None:
    certs = certs_of(None)
    docs = render(helm, "gb", "gpu-system", other_values(certs), tmp_path)
    kinds = sorted({d["kind"] for d in docs})
    assert "Certificate" not in kinds and "Issuer" not in kinds
    assert {"Secret", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"} <= set(kinds)
    assert ("ClusterRole", "gb-tenant") not in by_key(docs)
    assert all(labels(d)["team"] == "gpu" for d in docs)

    hook = one(docs, "MutatingWebhookConfiguration")
    assert "annotations" not in hook["metadata"]
    vmis, pods = hook["webhooks"]
    system = ["kube-system", "kube-public", "kube-node-lease", "gpu-system"]
    for webhook in (vmis, pods):
        assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Ignore", 15)
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]).decode() == certs.ca
    excluded = vmis["namespaceSelector"]["matchExpressions"][0]["values"]
    assert excluded == [*system, "tenant-system"]
    # Slot resources are checked on pods in every namespace but the system ones.
    assert pods["namespaceSelector"]["matchExpressions"][0]["values"] == system
    secret = by_key(docs)[("Secret", "gb-webhook-tls")]
    assert secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["tls.crt"]).decode() == certs.crt
    # The CA of the API server's webhook client certificate, given as a PEM.
    client_ca = by_key(docs)[("Secret", "gb-webhook-client-ca")]
    assert base64.b64decode(client_ca["data"]["ca.crt"]).decode() == certs.ca

    binder = one(docs, "Deployment")
    pod = binder["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert binder["spec"]["replicas"] == 3
    assert container["image"] == "registry.example/gpu-binder:9.9.9"
    assert container["args"][-1] == "--log-level=debug"
    assert "--webhook-client-names=apiserver-a,apiserver-b" in container["args"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {k: env[k] for k in env if k.startswith("GPU_BINDER_")} == {
        "GPU_BINDER_RESYNC": "1m",
        "GPU_BINDER_LOG_FORMAT": "text",
        "GPU_BINDER_LOST_GRACE": "10m",
        "GPU_BINDER_BIND_TIMEOUT": "5s",
        "GPU_BINDER_LEDGER_NAMESPACE": "gpu-binder-ledger",
    }
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]

    agent = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    (container,) = agent["containers"]
    assert container["args"] == [
        "agent",
        "--root=/host",
        "--no-device-plugin",
        "--interval=30s",
        "--resync=10m",
        "--vendor=0x10de",
        "--vendor=0x1002",
    ]
    assert "nodeSelector" not in agent
    assert "device-plugins" not in {v["name"] for v in agent["volumes"]}
    (drivers,) = [m for m in container["volumeMounts"] if m["name"] == "pci-drivers"]
    assert drivers == {"name": "pci-drivers", "mountPath": "/host/sys/bus/pci/drivers"}
    policies = by_key(docs)
    (condition,) = policies[("ValidatingAdmissionPolicy", "gb-agent-own-node")]["spec"][
        "matchConditions"
    ]
    assert "'system:serviceaccount:gpu-system:gb-agent'" in condition["expression"]
    slots = policies[("ValidatingAdmissionPolicy", "gb-slot-resources")]["spec"]
    (condition,) = slots["matchConditions"]
    user = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"
    assert condition["expression"] == f"request.userInfo.username != '{user}'"
    assert user in slots["validations"][0]["message"]
    binding = policies[("ValidatingAdmissionPolicyBinding", "gb-slot-resources")]
    assert binding["spec"]["policyName"] == "gb-slot-resources"
    assert one(docs, "ConfigMap")["metadata"]["namespace"] == "monitoring"
    rules = one(docs, "PrometheusRule")
    assert rules["metadata"]["namespace"] == "monitoring"
    assert labels(rules)["release"] == "prometheus"
    (group,) = rules["spec"]["groups"]
    assert all(r["labels"]["team"] == "gpu" for r in group["rules"])
    # The Service's name is the job Prometheus Operator gives the ServiceMonitor's series.
    assert all('job="gb-webhook"' in r["expr"] for r in group["rules"])
    (test_pod,) = [d for d in docs if d["kind"] == "Pod"]
    assert test_pod["spec"]["containers"][0]["args"] == ["check", "--namespace", "tenant-a"]
    assert_consistent(docs, "gpu-system")


def test_helm_test_creates_a_dry_run_gpu_vmi_where_the_webhook_serves(helm: Path) -> None:
    docs = render(helm)
    hooks = [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]
    assert {d["kind"] for d in hooks} == {"ServiceAccount", "Role", "RoleBinding", "Pod"}
    for d in hooks:
        annotations = d["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test", d["kind"]
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"], d["kind"]
    pod = one(hooks, "Pod")
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["check", "--namespace", "default"]
    assert pod["spec"]["serviceAccountName"] == one(hooks, "ServiceAccount")["metadata"]["name"]
    # It may create VMIs in that namespace and nothing else.
    role = one(hooks, "Role")
    assert role["metadata"]["namespace"] == "default"
    assert role["rules"] == [
        {
            "apiGroups": ["kubevirt.io"],
            "resources": ["virtualmachineinstances"],
            "verbs": ["create"],
        }
    ]
    hooks = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    (vmi_hook,) = [h for h in hooks if h["name"].startswith("vmi.")]
    excluded = vmi_hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert "default" not in excluded


def test_the_defaults_are_consistent_too(helm: Path) -> None:
    assert_consistent(render(helm, "other", "gpus"), "gpus")


def assert_consistent(docs: list[dict[str, Any]], namespace: str) -> None:
    """The names the objects give each other point at objects of the render."""
    objects = by_key(docs)
    service = one(docs, "Service")
    binder = one(docs, "Deployment")
    pod = binder["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert binder["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    webhooks = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    for webhook in webhooks:
        target = webhook["clientConfig"]["service"]
        assert (target["name"], target["namespace"]) == (service["metadata"]["name"], namespace)
        assert target["port"] in {p["port"] for p in service["spec"]["ports"]}
    assert [w["clientConfig"]["service"]["path"] for w in webhooks] == ["/mutate", "/mutate-pods"]
    # The Secret the binder mounts is the chart's, or the one its Certificate makes.
    (tls,) = [v for v in pod["spec"]["volumes"] if v["name"] == "certs"]
    secret = tls["secret"]["secretName"]
    makers = [d for d in docs if d["kind"] in ("Secret", "Certificate")]
    (maker,) = [
        d for d in makers if secret == d.get("spec", {}).get("secretName", d["metadata"]["name"])
    ]
    if maker["kind"] == "Certificate":
        assert f"{target['name']}.{namespace}.svc" in maker["spec"]["dnsNames"]
    accounts = {n for (k, n) in objects if k == "ServiceAccount"}
    for d in docs:
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            (subject,) = d["subjects"]
            assert subject["name"] in accounts and subject["namespace"] == namespace
            assert (d["roleRef"]["kind"], d["roleRef"]["name"]) in objects
        if d["kind"] in ("Deployment", "DaemonSet"):
            assert d["spec"]["template"]["spec"]["serviceAccountName"] in accounts
        if d["kind"] == "ServiceMonitor":
            wanted = d["spec"]["selector"]["matchLabels"]
            assert wanted.items() <= labels(service).items()
            assert {e["port"] for e in d["spec"]["endpoints"]} <= {
                p["name"] for p in service["spec"]["ports"]
            }
    agent = [d for d in docs if d["kind"] == "DaemonSet"]
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    # The agent's policy is the one about GPUDevices; the other is the slot resources'.
    policy = [p for p in policies if p["metadata"]["name"].endswith("-agent-own-node")]
    if agent and policy:
        account = agent[0]["spec"]["template"]["spec"]["serviceAccountName"]
        user = f"'system:serviceaccount:{namespace}:{account}'"
        assert user in policy[0]["spec"]["matchConditions"][0]["expression"]
    bound = {
        d["spec"]["policyName"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert bound == {p["metadata"]["name"] for p in policies}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # values.schema.json: the value's path, and what it must be.
        (
            {"webhook": {"certificateSource": "vault"}},
            "at '/webhook/certificateSource': value must be one of 'certManager', 'secret'",
        ),
        ({"webhook": {"timeoutSeconds": 31}}, "at '/webhook/timeoutSeconds': maximum"),
        ({"webhook": {"failurePolicy": "fail"}}, "at '/webhook/failurePolicy'"),
        (
            {"slotResourcePolicy": {"kubevirtNamespace": "kube' || true"}},
            "at '/slotResourcePolicy/kubevirtNamespace'",
        ),
        ({"binder": {"replica": 3}}, "at '/binder': additional properties 'replica' not allowed"),
        ({"binder": {"replicas": 0}}, "at '/binder/replicas': minimum"),
        (
            {"binder": {"config": {"lostgrace": "5m"}}},
            "at '/binder/config': additional properties 'lostgrace' not allowed",
        ),
        ({"binder": {"config": {"lostGrace": "5"}}}, "at '/binder/config/lostGrace'"),
        ({"agent": {"interval": 30}}, "at '/agent/interval'"),
        ({"agent": {"vendors": ["10de"]}}, "at '/agent/vendors/0'"),
        ({"serviceMonitor": {"enable": True}}, "additional properties 'enable' not allowed"),
        ({"prometheusRules": {"enabled": True}}, "additional properties 'prometheusRules'"),
        # The templates' own checks: what a schema cannot say.
        ({"webhook": {"certificateSource": "secret"}}, "webhook.secret.caBundle"),
        (
            {"webhook": {"certificateSource": "secret", "secret": {"caBundle": "x"}}},
            "webhook.secret.tlsCrt is required",
        ),
        (
            {"binder": {"replicas": 1}},
            "binder.podDisruptionBudget.minAvailable (1) must be below binder.replicas (1)",
        ),
    ],
)
def test_values_that_cannot_work_are_refused_naming_the_value(
    helm: Path, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values))
    # The schema is checked by lint too; the templates' own checks only when rendering
    # (lint reports a `required` value as INFO).
    schema = message.startswith("at '/") or "additional properties" in message
    for command in ("template", "lint") if schema else ("template",):
        args = [command, *(["x"] if command == "template" else []), str(CHART)]
        done = run_helm(helm, *args, "--values", str(file))
        assert done.returncode != 0, command
        assert message in done.stdout + done.stderr, done.stdout + done.stderr


# --- on the API server --------------------------------------------------------------------

# Stand-ins for the CRDs of cert-manager and the Prometheus Operator, without schemas (as
# deploy/kubevirt's are for KubeVirt): the API server checks the objects' shape, not them.
THIRD_PARTY = [
    ("cert-manager.io", "Certificate", "certificates"),
    ("cert-manager.io", "Issuer", "issuers"),
    ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
    ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
]


def stand_in_crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> ControlPlane:
    control_plane.install_crds([CHART / "crds"])
    control_plane.install_crd_objects([stand_in_crd(*t) for t in THIRD_PARTY])
    return control_plane


class Discovery:
    """The REST path of any object, from the API server's discovery documents."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    def collection(self, doc: dict[str, Any]) -> str:
        api_version = doc["apiVersion"]
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if api_version not in self._resources:
            answer = self.cp.request("GET", base)
            assert answer.ok, answer.body
            self._resources[api_version] = {
                r["kind"]: (r["name"], r["namespaced"])
                for r in answer.json()["resources"]
                if "/" not in r["name"]
            }
        plural, namespaced = self._resources[api_version][doc["kind"]]
        if namespaced:
            return f"{base}/namespaces/{doc['metadata']['namespace']}/{plural}"
        return f"{base}/{plural}"


def dry_run_apply(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    """`kubectl apply --server-side --dry-run=server` of every document."""
    discovery = Discovery(cp)
    refused = []
    for doc in docs:
        name = doc["metadata"]["name"]
        query = "dryRun=All&fieldManager=helm&force=true"
        path = f"{discovery.collection(doc)}/{name}?{query}"
        answer = cp.request("PATCH", path, doc, content_type=APPLY)
        if not answer.ok:
            refused.append(f"{doc['kind']} {name}: {answer.body.decode()[:500]}")
    assert not refused, "\n".join(refused)


# Each render names its objects after a release of its own: applied over the objects of
# deploy/ the session's other tests installed (a webhook with a url, say), a server-side
# apply would merge with fields other managers own instead of checking the chart's alone.


def test_every_object_of_the_default_render_is_accepted_by_the_api_server(
    helm: Path, cluster: ControlPlane
) -> None:
    # The render's own ledger Namespace is a dry run too, so its Role needs it made first
    # (helm creates namespaces before what goes in them); alone, this test found none.
    for ns in ("gpu-binder", LEDGER_NAMESPACE):
        put(cluster, {"kind": "Namespace", "metadata": {"name": ns}})
    docs = render(helm, release=f"check-{uid()}")
    assert len(docs) >= 17
    dry_run_apply(cluster, docs)


def test_every_object_of_another_render_is_accepted_by_the_api_server(
    helm: Path, cluster: ControlPlane, tmp_path: Path
) -> None:
    monitoring = f"monitoring-{uid()}"
    for ns in ("gpu-system", monitoring, "tenant-a", LEDGER_NAMESPACE):
        put(cluster, {"kind": "Namespace", "metadata": {"name": ns}})
    values = other_values(certs_of(cluster), monitoring, fullname=f"gb-{uid()}")
    docs = render(helm, "gb", "gpu-system", values, tmp_path)
    dry_run_apply(cluster, docs)


def test_a_refused_object_is_reported(cluster: ControlPlane) -> None:
    """The dry run above can fail: an object the API server refuses is named."""
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "broken", "namespace": "default"},
        "spec": {"replicas": "two"},
    }
    with pytest.raises(AssertionError, match="Deployment broken"):
        dry_run_apply(cluster, [bad])


def test_by_default_the_chart_makes_the_api_servers_webhook_client_identity(helm: Path) -> None:
    # A CA of its own (not the cluster's client CA), the API server's client certificate
    # from it, and the binder trusting that CA's ca.crt alone (never its key).
    chart = by_key(render(helm))
    ca = chart[("Certificate", "gpu-binder-webhook-client-ca")]["spec"]
    assert ca["isCA"] is True and ca["secretName"] == "gpu-binder-webhook-client-ca"
    client = chart[("Certificate", "gpu-binder-apiserver-webhook-client")]["spec"]
    assert client["commonName"] == "kube-apiserver-webhook-client"
    assert client["usages"] == ["client auth", "digital signature"]
    assert client["issuerRef"]["name"] == "gpu-binder-webhook-client-ca"
    pod = chart[("Deployment", "gpu-binder")]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    args = pod["containers"][0]["args"]
    assert "--webhook-client-ca-file=/client-ca/ca.crt" in args


def test_client_auth_off_serves_any_client_and_makes_no_client_ca(
    helm: Path, tmp_path: Path
) -> None:
    docs = render(helm, values={"webhook": {"clientAuth": {"enabled": False}}}, tmp=tmp_path)
    keys = by_key(docs)
    assert ("Certificate", "gpu-binder-webhook-client-ca") not in keys
    pod = keys[("Deployment", "gpu-binder")]["spec"]["template"]["spec"]
    assert not any(a.startswith("--webhook-client") for a in pod["containers"][0]["args"])
    assert "client-ca" not in {v["name"] for v in pod["volumes"]}
