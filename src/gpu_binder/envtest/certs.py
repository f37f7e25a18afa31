"""Certificates for a local control plane, generated with ``cryptography``.

Like controller-runtime's envtest (its "tinyca"): one CA (ECDSA P-256) that signs the
apiserver's serving certificate (SANs 127.0.0.1, ::1 and localhost) and client
certificates (the admin is ``O=system:masters``), plus an RSA key pair with which the
apiserver signs and checks service-account tokens. The same CA can issue serving
certificates for webhooks called by the apiserver.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError as e:  # the binder's image installs no extras
    raise ImportError(
        "a local control plane needs cryptography: pip install 'gpu-binder[controlplane]'"
    ) from e

__all__ = [
    "CertificateAuthority",
    "ControlPlaneCerts",
    "KeyPair",
    "generate_control_plane_certs",
    "generate_service_account_keys",
]

_VALIDITY = dt.timedelta(days=7)
_CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write ``<name>.crt`` and ``<name>.key`` (mode 0600) into ``directory``."""
        cert = directory / f"{name}.crt"
        key = directory / f"{name}.key"
        cert.write_bytes(self.cert_pem)
        _write_private(key, self.key_pem)
        return cert, key


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str = "gpu-binder-envtest-ca") -> None:
        self._key = _ec_key()
        now = dt.datetime.now(dt.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)
        self.key_pem: bytes = _key_pem(self._key)

    @property
    def certificate(self) -> x509.Certificate:
        return self._cert

    def issue(
        self,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        """A certificate signed by this CA; ``server``/``client`` set the extended key usage."""
        if not (server or client):
            raise ValueError("a certificate must be for server use, client use, or both")
        key = _ec_key()
        now = dt.datetime.now(dt.UTC)
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def issue_serving(
        self, common_name: str, hosts: Sequence[str] = ("127.0.0.1", "::1", "localhost")
    ) -> KeyPair:
        """A serving certificate for ``hosts`` (IP addresses and DNS names, sorted out here)."""
        ips: list[str] = []
        dns: list[str] = []
        for host in hosts:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                dns.append(host)
            else:
                ips.append(host)
        return self.issue(common_name, dns_names=dns, ip_addresses=ips, server=True)

    def issue_client(self, user: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate: CN is the user name, O the groups (as Kubernetes reads them)."""
        return self.issue(user, organizations=groups, client=True)


def generate_service_account_keys(bits: int = 2048) -> tuple[bytes, bytes]:
    """An RSA key pair for service-account tokens: (private PEM, public PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


@dataclass(frozen=True)
class ControlPlaneCerts:
    """Everything the apiserver and its admin need."""

    ca: CertificateAuthority
    serving: KeyPair
    admin: KeyPair
    service_account_key_pem: bytes
    service_account_pub_pem: bytes


ADMIN_USER = "gpu-binder-envtest-admin"
ADMIN_GROUPS = ("system:masters",)


def generate_control_plane_certs() -> ControlPlaneCerts:
    """A fresh CA, apiserver serving cert, ``system:masters`` admin and service-account keys."""
    ca = CertificateAuthority()
    serving = ca.issue_serving("kube-apiserver")
    admin = ca.issue_client(ADMIN_USER, ADMIN_GROUPS)
    sa_key, sa_pub = generate_service_account_keys()
    return ControlPlaneCerts(ca, serving, admin, sa_key, sa_pub)
