"""The client certificate the API server presents to admission webhooks.

kube-apiserver does not use its `--proxy-client-cert-file` for webhooks (that one is for
aggregated API servers and the peer proxy: k8s.io/kubernetes pkg/controlplane/apiserver
aggregator.go and peer.go). A webhook's client credentials come from the kubeconfig named
by the `kubeConfigFile` of the MutatingAdmissionWebhook and ValidatingAdmissionWebhook
plugins in the file of `--admission-control-config-file` (apiserver pkg/util/webhook
authentication.go: a user named `<service>.<namespace>.svc:<port>`, `*.<domain>`, or `*`
for every webhook). The control plane gets one: a CA of its own (not the cluster's client
CA, which signs every user) signs a certificate for `kube-apiserver-webhook-client`, and
every webhook is called with it.

An AuthorizationConfiguration (`--authorization-config`) may add webhook authorizers the
same certificate identifies the API server to (deploy/apiserver/authorization-config.yaml).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .certs import CertificateAuthority

CLIENT_NAME = "kube-apiserver-webhook-client"


@dataclass(frozen=True)
class WebhookClient:
    """The CA a webhook trusts and the files the API server reads."""

    ca: CertificateAuthority
    ca_file: Path
    kubeconfig: Path
    admission_config: Path
    cert_file: Path
    key_file: Path
    name: str = CLIENT_NAME


def write_webhook_client(directory: Path) -> WebhookClient:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("kube-apiserver-webhook-client-ca")
    ca_file = directory / "webhook-client-ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    cert_file, key_file = ca.issue_client(CLIENT_NAME).write(directory, "webhook-client")
    kubeconfig = directory / "webhook-client.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                # "*": the credentials for every webhook (URL or Service).
                "users": [
                    {
                        "name": "*",
                        "user": {
                            "client-certificate": str(cert_file),
                            "client-key": str(key_file),
                        },
                    }
                ],
            }
        )
    )
    admission = directory / "admission-config.yaml"
    plugins = [
        {
            "name": name,
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "WebhookAdmissionConfiguration",
                "kubeConfigFile": str(kubeconfig),
            },
        }
        for name in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")
    ]
    admission.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": plugins,
            }
        )
    )
    return WebhookClient(ca, ca_file, kubeconfig, admission, cert_file, key_file)


def write_authorization_config(
    directory: Path, template: dict[str, Any], url: str, client: WebhookClient, ca_file: Path
) -> Path:
    """An AuthorizationConfiguration from template (deploy/apiserver/'s), each webhook
    authorizer's kubeconfig pointing at url with the webhook client certificate."""
    kubeconfig = directory / "authorization.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "w", "cluster": {"server": url, "certificate-authority": str(ca_file)}}
                ],
                "users": [
                    {
                        "name": "w",
                        "user": {
                            "client-certificate": str(client.cert_file),
                            "client-key": str(client.key_file),
                        },
                    }
                ],
                "contexts": [{"name": "w", "context": {"cluster": "w", "user": "w"}}],
                "current-context": "w",
            }
        )
    )
    config = copy.deepcopy(template)
    for authorizer in config["authorizers"]:
        if authorizer["type"] == "Webhook":
            authorizer["webhook"]["connectionInfo"]["kubeConfigFile"] = str(kubeconfig)
    path = directory / "authorization-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
