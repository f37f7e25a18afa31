"""Finding the binaries (no control plane needed) and the generated certificates."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpu_binder.envtest import (
    DEFAULT_K8S_VERSION,
    AssetsUnavailable,
    cache_dir,
    ensure_assets,
    find_assets,
    generate_control_plane_certs,
)

_ENV = (
    "KUBEBUILDER_ASSETS",
    "TEST_ASSET_KUBE_APISERVER",
    "TEST_ASSET_ETCD",
    "GPU_BINDER_CACHE",
    "GPU_BINDER_K8S_VERSION",
    "GPU_BINDER_BUILD_SCRIPT",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPU_BINDER_CACHE", str(tmp_path / "cache"))


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_kubebuilder_assets_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    d = tmp_path / "kb"
    _exe(d / "kube-apiserver")
    _exe(d / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(d))
    found = find_assets()
    assert found is not None
    assert (found.kube_apiserver, found.etcd) == (d / "kube-apiserver", d / "etcd")


def test_single_binary_variables_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    d = tmp_path / "kb"
    _exe(d / "kube-apiserver")
    _exe(d / "etcd")
    other = _exe(tmp_path / "other" / "my-etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(d))
    monkeypatch.setenv("TEST_ASSET_ETCD", str(other))
    found = find_assets()
    assert found is not None
    assert (found.kube_apiserver, found.etcd) == (d / "kube-apiserver", other)


def test_named_but_missing_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "nowhere"))
    with pytest.raises(AssetsUnavailable, match="KUBEBUILDER_ASSETS"):
        find_assets()


def test_cache_dir_keyed_by_version(tmp_path: Path) -> None:
    assert cache_dir() == tmp_path / "cache" / "controlplane" / DEFAULT_K8S_VERSION
    _exe(cache_dir() / "kube-apiserver")
    assert find_assets() is None
    _exe(cache_dir() / "etcd")
    found = find_assets()
    assert found is not None and found.source.startswith("cache")
    assert find_assets("v1.36.3") is None


def test_without_go_it_says_how_to_enable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(AssetsUnavailable, match="KUBEBUILDER_ASSETS") as info:
        ensure_assets()
    assert "\n" not in str(info.value)
    with pytest.raises(AssetsUnavailable):
        ensure_assets(build=False)


def test_build_script_and_default_version_agree() -> None:
    script = Path(__file__).resolve().parents[2] / "scripts" / "build-controlplane.sh"
    assert f"GPU_BINDER_K8S_VERSION:-{DEFAULT_K8S_VERSION}" in script.read_text()


def test_generated_certificates() -> None:
    certs = generate_control_plane_certs()
    ca = x509.load_pem_x509_certificate(certs.ca.cert_pem)
    serving = x509.load_pem_x509_certificate(certs.serving.cert_pem)
    admin = x509.load_pem_x509_certificate(certs.admin.cert_pem)

    serving.verify_directly_issued_by(ca)
    admin.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    eku = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku

    orgs = [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    assert b"BEGIN PUBLIC KEY" in certs.service_account_pub_pem
    assert b"BEGIN PRIVATE KEY" in certs.service_account_key_pem
