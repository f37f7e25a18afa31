"""A local kube-apiserver + etcd, started the way controller-runtime's envtest starts them.

etcd listens on random loopback ports (client and peer) with a temporary data directory;
kube-apiserver on a random loopback secure port, with certificates generated for this run
(:mod:`gpu_binder.envtest.certs`), RBAC authorization, service-account signing keys, and
the ``ServiceAccount`` admission plugin disabled so no controller-manager is needed.
Readiness is polled on ``/healthz`` then ``/readyz``. A kubeconfig for a client-certificate
admin (``system:masters``) is written for other tools (kubectl, kubernetes-asyncio).

By default there is no controller-manager or scheduler: namespaces are not finalized on
deletion, garbage collection does not run, and pods are never scheduled.
``components=("kube-scheduler", "kube-controller-manager")`` starts them too
(:mod:`gpu_binder.envtest.components`), after the apiserver, stopped before it.

    with ControlPlane() as cp:
        cp.install_crds(["deploy/crds"])
        print(cp.kubeconfig)
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from . import crd, rest
from .apiserver import start_apiserver
from .assets import ControlPlaneAssets, NodeAssets, Progress, ensure_assets, ensure_node_assets
from .certs import ADMIN_USER, ControlPlaneCerts, generate_control_plane_certs
from .components import CONTROLLER_MANAGER, SCHEDULER, component_kubeconfig, start_component
from .etcd import start_etcd
from .files import write_kubeconfig
from .process import ControlPlaneError, Process
from .rest import ApiResponse
from .users import User, issue_user
from .webhookclient import WebhookClient, write_authorization_config, write_webhook_client

__all__ = ["ApiResponse", "ControlPlane", "ControlPlaneError", "User", "WebhookClient"]


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
        components: Sequence[str] = (),
        component_flags: Mapping[str, Mapping[str, str | None]] | None = None,
        node_assets: NodeAssets | None = None,
        authorization: tuple[Mapping[str, Any], str] | None = None,
    ) -> None:
        unknown = set(components) - {SCHEDULER, CONTROLLER_MANAGER}
        if unknown:
            raise ValueError(f"unknown components {sorted(unknown)}")
        self.components = tuple(components)
        self._component_flags = {k: dict(v) for k, v in (component_flags or {}).items()}
        self._node_assets = node_assets
        self._running: dict[str, Process] = {}
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
        # (an AuthorizationConfiguration, the URL of its webhook authorizers): replaces
        # --authorization-mode=RBAC.
        self._authorization = authorization
        self._work: Path | None = None
        self._etcd: Process | None = None
        self._apiserver: Process | None = None
        self._certs: ControlPlaneCerts | None = None
        self._ssl: ssl.SSLContext | None = None
        self._url: str | None = None
        self._etcd_url: str | None = None
        self._etcd_peer_url: str | None = None
        self._ca_file: Path | None = None
        self._kubeconfig: Path | None = None
        self._admin: User | None = None
        self._webhook_client: WebhookClient | None = None
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
            if self.components and self._node_assets is None:
                self._node_assets = ensure_node_assets(build=self._build, progress=self._progress)
            for name in self.components:
                self.start_component(name)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop the components, kube-apiserver, then etcd (SIGTERM, SIGKILL after 10 s);
        remove temp dirs."""
        for name in list(self._running):
            self.stop_component(name)
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

    def processes(self) -> dict[str, Process]:
        """The running processes by name: etcd, kube-apiserver and the components."""
        named = {"etcd": self._etcd, "kube-apiserver": self._apiserver, **self._running}
        return {name: p for name, p in named.items() if p is not None}

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
    def node_assets(self) -> NodeAssets:
        """The node path's binaries (found or built when components were started)."""
        if self._node_assets is None:
            self._node_assets = ensure_node_assets(build=self._build, progress=self._progress)
        return self._node_assets

    @property
    def webhook_client(self) -> WebhookClient:
        """The client certificate the API server presents to every webhook, and its CA."""
        self._require()
        assert self._webhook_client is not None
        return self._webhook_client

    @property
    def work_dir(self) -> Path:
        return self._require()

    @property
    def log_files(self) -> dict[str, Path]:
        """``{"etcd": ..., "kube-apiserver": ...}`` (under ``work_dir/logs``)."""
        work = self._require()
        names = ("etcd", "kube-apiserver", *self.components)
        return {name: work / "logs" / f"{name}.log" for name in names}

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
        certs.ca.issue_client("kube-apiserver-kubelet-client", ("system:masters",)).write(
            cert_dir, "apiserver-kubelet-client"
        )
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
        self._webhook_client = write_webhook_client(cert_dir)

    def _start_etcd(self, assets: ControlPlaneAssets) -> None:
        assert self._work is not None
        self._etcd, self._etcd_url, self._etcd_peer_url = start_etcd(
            assets.etcd, self._work, self._etcd_flags, self.start_timeout
        )

    def _start_apiserver(self, assets: ControlPlaneAssets, port: int | None = None) -> None:
        assert self._work is not None and self._etcd_url is not None and self._ssl is not None
        assert self._webhook_client is not None
        # Webhooks are called with the control plane's webhook client certificate.
        flags: dict[str, str | None] = {
            "admission-control-config-file": str(self._webhook_client.admission_config),
        }
        if self._authorization is not None:
            template, url = self._authorization
            certs = self._work / "certs"
            config = write_authorization_config(
                certs, dict(template), url, self._webhook_client, certs / "ca.crt"
            )
            flags.update({"authorization-config": str(config), "authorization-mode": None})
        flags.update(self._apiserver_flags)
        self._apiserver, self._url = start_apiserver(
            assets.kube_apiserver,
            self._work,
            self._etcd_url,
            self._ssl,
            flags,
            self.start_timeout,
            port,
        )

    # ---------------------------------------------------------------- faults

    def restart_apiserver(self, down: float = 0.0) -> None:
        """Stop kube-apiserver, wait down seconds, start it again on the same URL."""
        assert self._apiserver is not None and self._assets is not None
        port = int(self.url.rsplit(":", 1)[1])
        self._apiserver.stop()
        time.sleep(down)
        self._start_apiserver(self._assets, port)

    def restart_etcd(self, down: float = 0.0) -> None:
        """Stop etcd, wait down seconds, start it again on its ports with its data."""
        assert self._etcd is not None and self._assets is not None and self._work is not None
        assert self._etcd_url is not None and self._etcd_peer_url is not None
        self._etcd.stop()
        time.sleep(down)
        self._etcd, _, _ = start_etcd(
            self._assets.etcd,
            self._work,
            self._etcd_flags,
            self.start_timeout,
            again=(self._etcd_url, self._etcd_peer_url),
        )

    def start_component(self, name: str) -> None:
        """Start kube-scheduler or kube-controller-manager (again, after stop_component)."""
        work = self._require()
        assert self._node_assets is not None and self._certs is not None
        if name in self._running:
            raise ControlPlaneError(f"{name} already running")
        binary = {
            SCHEDULER: self._node_assets.kube_scheduler,
            CONTROLLER_MANAGER: self._node_assets.kube_controller_manager,
        }[name]
        kubeconfig = component_kubeconfig(self._certs, self.url, work, name)
        flags = self._component_flags.get(name, {})
        self._running[name] = start_component(
            name, binary, work, kubeconfig, flags, self.start_timeout
        )

    def stop_component(self, name: str) -> None:
        proc = self._running.pop(name, None)
        if proc is not None:
            proc.stop()

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
        return issue_user(self._certs, self._url, work / "users", name, groups)

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
        ctx = self.ssl_context(user)
        return rest.request(
            self.url, ctx, method, path, body, content_type=content_type, timeout=timeout
        )

    # ---------------------------------------------------------------- CRDs

    def install_crds(
        self, paths: Iterable[str | os.PathLike[str]], *, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Create (or update) the CRDs in YAML/JSON files or directories of them; wait for
        them (see :func:`gpu_binder.envtest.crd.install_crds`). Returns the stored CRDs."""
        return crd.install_crds(self.request, paths, timeout=timeout)

    def install_crd_objects(
        self, crds: Iterable[Mapping[str, Any]], *, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Create-or-update these CRD objects, then wait until discovery serves them."""
        return crd.install_crd_objects(self.request, crds, timeout=timeout)

    def wait_for_crds(self, crds: Iterable[Mapping[str, Any]], *, timeout: float = 30.0) -> None:
        """Wait until every served version of each CRD is in discovery and it can be listed."""
        crd.wait_for_crds(self.request, crds, timeout=timeout)
