"""A local kube-apiserver + etcd, started the way controller-runtime's envtest starts them.

etcd listens on random loopback ports (client and peer) with a temporary data directory;
kube-apiserver on a random loopback secure port, with certificates generated for this run
(:mod:`gpu_binder.envtest.certs`), RBAC authorization, service-account signing keys, and
the ``ServiceAccount`` admission plugin disabled so no controller-manager is needed.
Readiness is polled on ``/healthz`` then ``/readyz``. A kubeconfig for a client-certificate
admin (``system:masters``) is written for other tools (kubectl, kubernetes-asyncio).

There is no controller-manager or scheduler: namespaces are not finalized on deletion,
garbage collection does not run, and pods are never scheduled.

    with ControlPlane() as cp:
        cp.install_crds(["deploy/crds"])
        print(cp.kubeconfig)
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from .assets import ControlPlaneAssets, Progress, ensure_assets
from .certs import ADMIN_USER, ControlPlaneCerts, generate_control_plane_certs
from .files import crd_files, crds_in, write_kubeconfig
from .process import (
    LOOPBACK,
    Process,
    apiserver_ready,
    etcd_healthy,
    flag_args,
    free_port,
)

__all__ = ["ApiResponse", "ControlPlane", "ControlPlaneError", "User"]

CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_PORT_RETRIES = 3


class ControlPlaneError(RuntimeError):
    """A component failed to start, stopped early, or a wait timed out."""


@dataclass(frozen=True)
class ApiResponse:
    """A raw answer of the apiserver (any status; nothing is raised for 4xx/5xx)."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class User:
    """A client-certificate user of the control plane, with its own kubeconfig."""

    name: str
    groups: tuple[str, ...]
    cert_file: Path
    key_file: Path
    kubeconfig: Path

    def ssl_context(self, ca_file: Path) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca_file))
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx


class ControlPlane:
    """kube-apiserver + etcd on loopback; a context manager (``start`` / ``stop``).

    ``apiserver_flags`` / ``etcd_flags`` override or add flags (names without ``--``; a
    value of None removes a default flag). ``work_dir`` (default: a new temporary
    directory) holds certificates, etcd data, logs and the kubeconfig; it is removed on
    ``stop`` unless it was given or ``keep_work_dir`` is true (env
    ``GPU_BINDER_ENVTEST_KEEP=1`` sets that too, to read the logs after a failure).
    """

    def __init__(
        self,
        assets: ControlPlaneAssets | None = None,
        *,
        apiserver_flags: Mapping[str, str | None] | None = None,
        etcd_flags: Mapping[str, str | None] | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        keep_work_dir: bool | None = None,
        start_timeout: float = 90.0,
        build: bool = True,
        progress: Progress | None = None,
    ) -> None:
        self._assets = assets
        self._apiserver_flags = dict(apiserver_flags or {})
        self._etcd_flags = dict(etcd_flags or {})
        self._given_work_dir = Path(work_dir) if work_dir is not None else None
        if keep_work_dir is None:
            keep_work_dir = os.environ.get("GPU_BINDER_ENVTEST_KEEP", "") not in ("", "0")
        self._keep = keep_work_dir
        self.start_timeout = start_timeout
        self._build = build
        self._progress = progress
        self._work: Path | None = None
        self._etcd: Process | None = None
        self._apiserver: Process | None = None
        self._certs: ControlPlaneCerts | None = None
        self._ssl: ssl.SSLContext | None = None
        self._url: str | None = None
        self._etcd_url: str | None = None
        self._ca_file: Path | None = None
        self._kubeconfig: Path | None = None
        self._admin: User | None = None
        self.startup_seconds: float | None = None

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._url is not None

    def start(self) -> Self:
        """Start etcd, then kube-apiserver; return when ``/readyz`` answers ok."""
        if self.running:
            raise ControlPlaneError("control plane already started")
        assets = self._assets or ensure_assets(build=self._build, progress=self._progress)
        self._assets = assets
        started = time.monotonic()
        if self._given_work_dir is not None:
            self._given_work_dir.mkdir(parents=True, exist_ok=True)
            self._work = self._given_work_dir
        else:
            self._work = Path(tempfile.mkdtemp(prefix="gpu-binder-envtest-"))
        try:
            self._write_certs()
            self._start_etcd(assets)
            self._start_apiserver(assets)
            self._write_admin_kubeconfig()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd (SIGTERM, SIGKILL after 10 s); remove temp dirs."""
        if self._apiserver is not None:
            self._apiserver.stop()
            self._apiserver = None
        if self._etcd is not None:
            self._etcd.stop()
            self._etcd = None
        self._url = None
        self._ssl = None
        work, self._work = self._work, None
        if work is not None and not self._keep and self._given_work_dir is None:
            shutil.rmtree(work, ignore_errors=True)

    # ---------------------------------------------------------------- accessors

    def _require(self) -> Path:
        if self._work is None or self._url is None:
            raise ControlPlaneError("control plane not started")
        return self._work

    @property
    def url(self) -> str:
        """``https://127.0.0.1:<port>``."""
        self._require()
        assert self._url is not None
        return self._url

    @property
    def etcd_url(self) -> str:
        self._require()
        assert self._etcd_url is not None
        return self._etcd_url

    @property
    def kubeconfig(self) -> Path:
        """A kubeconfig file for the ``system:masters`` admin (data embedded)."""
        self._require()
        assert self._kubeconfig is not None
        return self._kubeconfig

    @property
    def ca_pem(self) -> bytes:
        """The CA that signed the apiserver's serving cert and the client certs."""
        self._require()
        assert self._certs is not None
        return self._certs.ca.cert_pem

    @property
    def ca_file(self) -> Path:
        self._require()
        assert self._ca_file is not None
        return self._ca_file

    @property
    def certs(self) -> ControlPlaneCerts:
        """All generated material; ``certs.ca`` can issue webhook serving certificates."""
        self._require()
        assert self._certs is not None
        return self._certs

    @property
    def admin(self) -> User:
        self._require()
        assert self._admin is not None
        return self._admin

    @property
    def work_dir(self) -> Path:
        return self._require()

    @property
    def log_files(self) -> dict[str, Path]:
        """``{"etcd": ..., "kube-apiserver": ...}`` (under ``work_dir/logs``)."""
        work = self._require()
        return {name: work / "logs" / f"{name}.log" for name in ("etcd", "kube-apiserver")}

    def ssl_context(self, user: User | None = None) -> ssl.SSLContext:
        """A client TLS context trusting the CA, authenticating as ``user`` (default admin)."""
        self._require()
        if user is None:
            assert self._ssl is not None
            return self._ssl
        return user.ssl_context(self.ca_file)

    # ---------------------------------------------------------------- startup steps

    def _write_certs(self) -> None:
        assert self._work is not None
        certs = generate_control_plane_certs()
        cert_dir = self._work / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        self._ca_file = cert_dir / "ca.crt"
        self._ca_file.write_bytes(certs.ca.cert_pem)
        certs.serving.write(cert_dir, "apiserver")
        admin_cert, admin_key = certs.admin.write(cert_dir, "admin")
        (cert_dir / "sa.key").write_bytes(certs.service_account_key_pem)
        (cert_dir / "sa.key").chmod(0o600)
        (cert_dir / "sa.pub").write_bytes(certs.service_account_pub_pem)
        self._certs = certs
        ctx = ssl.create_default_context(cafile=str(self._ca_file))
        ctx.load_cert_chain(str(admin_cert), str(admin_key))
        self._ssl = ctx
        self._admin = User(
            ADMIN_USER, ("system:masters",), admin_cert, admin_key, self._work / "kubeconfig"
        )

    def _start_etcd(self, assets: ControlPlaneAssets) -> None:
        assert self._work is not None
        data_dir = self._work / "etcd-data"
        last_error = ""
        for _attempt in range(_PORT_RETRIES):
            shutil.rmtree(data_dir, ignore_errors=True)
            data_dir.mkdir(mode=0o700, parents=True)
            client = f"http://{LOOPBACK}:{free_port()}"
            peer = f"http://{LOOPBACK}:{free_port()}"
            flags: dict[str, str | None] = {
                "name": "envtest",
                "data-dir": str(data_dir),
                "listen-client-urls": client,
                "advertise-client-urls": client,
                "listen-peer-urls": peer,
                "initial-advertise-peer-urls": peer,
                "initial-cluster": f"envtest={peer}",
                "initial-cluster-state": "new",
                "unsafe-no-fsync": "true",
                "log-level": "warn",
            }
            flags.update(self._etcd_flags)
            proc = Process("etcd", self._work / "logs" / "etcd.log")
            self._etcd = proc
            proc.start([str(assets.etcd), *flag_args(flags)])
            try:
                self._wait_until(proc, functools.partial(etcd_healthy, client), "etcd /health")
            except _EarlyExit as e:
                last_error = str(e)
                if "address already in use" in last_error:
                    continue
                raise ControlPlaneError(last_error) from None
            self._etcd_url = client
            return
        raise ControlPlaneError(f"etcd could not get free ports: {last_error}")

    def _start_apiserver(self, assets: ControlPlaneAssets) -> None:
        assert self._work is not None and self._etcd_url is not None and self._ssl is not None
        certs = self._work / "certs"
        last_error = ""
        for _attempt in range(_PORT_RETRIES):
            port = free_port()
            url = f"https://{LOOPBACK}:{port}"
            flags: dict[str, str | None] = {
                "advertise-address": LOOPBACK,
                "bind-address": LOOPBACK,
                "secure-port": str(port),
                "etcd-servers": self._etcd_url,
                "cert-dir": str(certs),
                "tls-cert-file": str(certs / "apiserver.crt"),
                "tls-private-key-file": str(certs / "apiserver.key"),
                "client-ca-file": str(certs / "ca.crt"),
                "service-account-issuer": f"{url}/",
                "service-account-key-file": str(certs / "sa.pub"),
                "service-account-signing-key-file": str(certs / "sa.key"),
                "service-cluster-ip-range": "10.0.0.0/24",
                "authorization-mode": "RBAC",
                "allow-privileged": "true",
                "disable-admission-plugins": "ServiceAccount",
                "profiling": "false",
                # a loopback advertise address is refused by the endpoint reconciler (v1.3x+)
                "endpoint-reconciler-type": "none",
            }
            flags.update(self._apiserver_flags)
            proc = Process("kube-apiserver", self._work / "logs" / "kube-apiserver.log")
            self._apiserver = proc
            proc.start([str(assets.kube_apiserver), *flag_args(flags)])
            ready = functools.partial(apiserver_ready, url, self._ssl)
            try:
                self._wait_until(proc, ready, "kube-apiserver /healthz and /readyz")
            except _EarlyExit as e:
                last_error = str(e)
                if "address already in use" in last_error:
                    continue
                raise ControlPlaneError(last_error) from None
            self._url = url
            return
        raise ControlPlaneError(f"kube-apiserver could not get a free port: {last_error}")

    def _wait_until(self, proc: Process, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        delay = 0.05
        while True:
            code = proc.exited()
            if code is not None:
                raise _EarlyExit(
                    f"{proc.name} exited with code {code} before {what} was ok; "
                    f"log {proc.log_path} (GPU_BINDER_ENVTEST_KEEP=1 keeps it):\n{proc.tail()}"
                )
            if check():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{what} not ok after {self.start_timeout:.0f} s; "
                    f"log {proc.log_path} (GPU_BINDER_ENVTEST_KEEP=1 keeps it):\n{proc.tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _write_admin_kubeconfig(self) -> None:
        admin = self._admin
        assert admin is not None and self._url is not None and self._certs is not None
        write_kubeconfig(
            admin.kubeconfig,
            self._url,
            self._certs.ca.cert_pem,
            self._certs.admin.cert_pem,
            self._certs.admin.key_pem,
            admin.name,
        )
        self._kubeconfig = admin.kubeconfig

    # ---------------------------------------------------------------- users

    def add_user(self, name: str, groups: Sequence[str] = ()) -> User:
        """A new client-certificate user (CN=name, O=groups) with its own kubeconfig.

        Nothing is granted: bind roles to it with RBAC objects as the admin.
        """
        work = self._require()
        assert self._certs is not None and self._url is not None
        pair = self._certs.ca.issue_client(name, groups)
        users = work / "users"
        users.mkdir(exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        cert, key = pair.write(users, safe)
        kubeconfig = users / f"{safe}.kubeconfig"
        write_kubeconfig(
            kubeconfig, self._url, self._certs.ca.cert_pem, pair.cert_pem, pair.key_pem, name
        )
        return User(name, tuple(groups), cert, key, kubeconfig)

    # ---------------------------------------------------------------- HTTP

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        user: User | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> ApiResponse:
        """One HTTPS request to the apiserver; ``body`` (if not bytes) is sent as JSON."""
        self._require()
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        ctx = self.ssl_context(user)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
                return ApiResponse(resp.status, resp.read(), dict(resp.headers.items()))
        except urllib.error.HTTPError as e:
            return ApiResponse(e.code, e.read(), dict(e.headers.items()))

    # ---------------------------------------------------------------- CRDs

    def install_crds(
        self, paths: Iterable[str | os.PathLike[str]], *, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Create (or update) the CRDs in YAML/JSON files or directories of them; wait for them.

        Directories are read one level deep (``*.yaml``, ``*.yml``, ``*.json``); documents
        that are not ``CustomResourceDefinition`` are ignored. Returns the stored CRDs.
        """
        crds: list[dict[str, Any]] = []
        for file in crd_files(paths):
            with file.open(encoding="utf-8") as f:
                for doc in yaml.safe_load_all(f):
                    crds.extend(crds_in(doc))
        if not crds:
            raise ValueError("no CustomResourceDefinition found in the given paths")
        return self.install_crd_objects(crds, timeout=timeout)

    def install_crd_objects(
        self, crds: Iterable[Mapping[str, Any]], *, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Create-or-update these CRD objects, then wait until discovery serves them."""
        stored: list[dict[str, Any]] = []
        for crd in crds:
            name = crd["metadata"]["name"]
            resp = self.request("POST", CRD_API, dict(crd))
            if resp.status == 409:
                current = self.request("GET", f"{CRD_API}/{name}")
                _raise_unless_ok(current, f"get CRD {name}")
                update = dict(crd)
                update["metadata"] = dict(crd["metadata"])
                update["metadata"]["resourceVersion"] = current.json()["metadata"][
                    "resourceVersion"
                ]
                resp = self.request("PUT", f"{CRD_API}/{name}", update)
            _raise_unless_ok(resp, f"install CRD {name}")
            stored.append(resp.json())
        self.wait_for_crds(stored, timeout=timeout)
        return [self.request("GET", f"{CRD_API}/{c['metadata']['name']}").json() for c in stored]

    def wait_for_crds(self, crds: Iterable[Mapping[str, Any]], *, timeout: float = 30.0) -> None:
        """Wait until every served version of each CRD is in discovery and it can be listed.

        Discovery alone is not enough: until the resource's watch cache has initialised,
        requests get ``429 storage is (re)initializing``; so the storage version is also
        listed (``limit=1``) until that answers 200.
        """
        # each pending check: a discovery path and the plural it must list, or a list path
        pending: set[tuple[str, str]] = set()
        for crd in crds:
            spec = crd["spec"]
            plural = spec["names"]["plural"]
            for version in spec["versions"]:
                group_version = f"/apis/{spec['group']}/{version['name']}"
                if version.get("served", True):
                    pending.add((group_version, plural))
                if version.get("storage", False):
                    pending.add((f"{group_version}/{plural}?limit=1", ""))
        deadline = time.monotonic() + timeout
        while True:
            for check in sorted(pending):
                path, plural = check
                resp = self.request("GET", path)
                if not resp.ok:
                    continue
                if not plural or any(r.get("name") == plural for r in resp.json()["resources"]):
                    pending.discard(check)
            if not pending:
                return
            if time.monotonic() > deadline:
                waiting = sorted(f"{path} {plural}".strip() for path, plural in pending)
                raise ControlPlaneError(f"CRDs not served after {timeout:.0f} s: {waiting}")
            time.sleep(0.1)


class _EarlyExit(Exception):
    pass


def _raise_unless_ok(resp: ApiResponse, what: str) -> None:
    if not resp.ok:
        try:
            message = resp.json().get("message", "")
        except ValueError:
            message = resp.body[:500].decode(errors="replace")
        raise ControlPlaneError(f"{what}: HTTP {resp.status}: {message}")
