"""A real node for the control plane: containerd + runc and a kubelet (DESIGN.md §7.4).

Everything lives in one work directory: containerd's config, root, state and socket, the
CNI config, the kubelet's root directory, config, certificates and pod logs.

What it takes to run pods on this kind of machine (cgroup v1, no systemd as PID 1, no
registry, no pod network), each checked by hand:

- containerd's CRI with ``restrict_oom_score_adj``: the sandbox may not lower its
  oom_score_adj here, and without it every sandbox fails to start;
- the kubelet with ``failCgroupV1: false`` (v1.3x refuses cgroup v1 otherwise),
  ``cgroupDriver: cgroupfs`` (no systemd), ``cgroupsPerQOS: false`` and
  ``enforceNodeAllocatable: []`` (it may not create the QoS hierarchy here);
- images made locally from busybox-static (:mod:`gpu_binder.envtest.image`) and imported
  into containerd's ``k8s.io`` namespace, one of them the sandbox image;
- one CNI network config, loopback only: the runtime reports NetworkReady (so the node
  is Ready) once it has loaded one, and pods that run here use the host's network
  (``hostNetwork: true``), so no interface or address is ever made;
- the device-plugin directory: the kubelet always uses
  ``/var/lib/kubelet/device-plugins/`` whatever ``--root-dir`` says (and links container
  logs in ``/var/log/containers/``). It runs in a mount namespace of its own where those
  paths are bind mounts of this node's directories, so two nodes (two test sessions)
  never share or wipe one directory, and the host's stay empty. Its root directory is a
  shared bind mount, so the volumes it mounts for pods are seen by containerd, which
  runs in the host's namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import yaml

from .controlplane import ControlPlane
from .files import write_kubeconfig
from .image import PAUSE_ENTRYPOINT, PAUSE_IMAGE, TEST_IMAGE, write_image
from .process import LOOPBACK, ControlPlaneError, Process, free_port

__all__ = ["DEVICE_PLUGIN_PATH", "KubeletNode", "node_packages_missing"]

# Where the kubelet's device manager serves kubelet.sock and looks for plugins.
DEVICE_PLUGIN_PATH = Path("/var/lib/kubelet/device-plugins")
# Where the kubelet links its containers' logs, whatever its config says.
CONTAINER_LOGS = Path("/var/log/containers")
NODE_PACKAGES = {"containerd": "containerd", "runc": "runc", "ctr": "containerd"}
CNI_BIN = Path("/usr/lib/cni")


def node_packages_missing() -> list[str]:
    """The Debian packages a real node needs that are not installed here."""
    missing = {pkg for cmd, pkg in NODE_PACKAGES.items() if shutil.which(cmd) is None}
    if not (CNI_BIN / "loopback").exists():
        missing.add("containernetworking-plugins")
    from .image import busybox_binary

    if busybox_binary() is None:
        missing.add("busybox-static")
    return sorted(missing)


def _containerd_config(work: Path, socket: Path) -> str:
    c = work / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{c / "root"}"
state = "{c / "state"}"
# Snapshotters this host cannot use only add errors to the log.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # The sandbox may not lower its oom_score_adj on this kind of host.
  restrict_oom_score_adj = true
  stream_server_address = "{LOOPBACK}"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{work / "cni"}"
"""


# The runtime is NetworkReady once one network is loaded; pods here use the host network.
CNI_CONFIG = {
    "cniVersion": "1.0.0",
    "name": "gpu-binder-host-network-only",
    "plugins": [{"type": "loopback"}],
}


class KubeletNode:
    """containerd and a kubelet registered with cp as node ``name``; a context manager.

    ``device_plugin_dir`` is where the kubelet's device-plugin directory is seen from the
    host: a device plugin (the node agent) serves its sockets there.
    """

    def __init__(
        self,
        cp: ControlPlane,
        kubelet: Path,
        name: str = "node-1",
        *,
        labels: Mapping[str, str] | None = None,
        work_dir: Path | None = None,
        start_timeout: float = 90.0,
        keep_work_dir: bool | None = None,
    ) -> None:
        self.cp = cp
        self.kubelet_binary = kubelet
        self.name = name
        self.labels = dict(labels or {})
        self.start_timeout = start_timeout
        self._given = work_dir
        if keep_work_dir is None:
            keep_work_dir = os.environ.get("GPU_BINDER_ENVTEST_KEEP", "") not in ("", "0")
        self._keep = keep_work_dir
        self.work = work_dir or Path(tempfile.mkdtemp(prefix=f"gpu-binder-{name}-"))
        self.socket = self.work / "containerd.sock"
        self.root_dir = self.work / "kubelet"
        self.device_plugin_dir = self.work / "device-plugins"
        self.containerd: Process | None = None
        self.kubelet: Process | None = None
        self.kubelet_port = free_port()
        self.healthz_port = free_port()
        self.image = TEST_IMAGE
        self.startup_seconds: float | None = None

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
    def log_files(self) -> dict[str, Path]:
        return {n: self.work / "logs" / f"{n}.log" for n in ("containerd", "kubelet")}

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        started = time.monotonic()
        try:
            for d in ("cni", "containerd", "logs", "pods-logs", "containers-logs", "certs"):
                (self.work / d).mkdir(parents=True, exist_ok=True)
            self.root_dir.mkdir(exist_ok=True)
            self.device_plugin_dir.mkdir(exist_ok=True)
            self._start_containerd()
            self._import_images()
            self._write_kubelet_files()
            self._share_root_dir()
            self.start_kubelet()
            self.wait_ready(self.start_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop the kubelet, kill what containerd runs, stop containerd, unmount, clean."""
        self.stop_kubelet()
        if self.containerd is not None:
            self._kill_tasks()
            self.containerd.stop()
            self.containerd = None
        self._unmount_all()
        if not self._keep and self._given is None:
            shutil.rmtree(self.work, ignore_errors=True)

    def start_kubelet(self) -> None:
        """Start the kubelet (again, after stop_kubelet) in its own mount namespace."""
        if self.kubelet is not None:
            raise ControlPlaneError("kubelet already running")
        DEVICE_PLUGIN_PATH.mkdir(parents=True, exist_ok=True)
        CONTAINER_LOGS.mkdir(parents=True, exist_ok=True)
        args = [
            str(self.kubelet_binary),
            f"--config={self.work / 'kubelet-config.yaml'}",
            f"--kubeconfig={self.work / 'kubelet.kubeconfig'}",
            f"--root-dir={self.root_dir}",
            f"--hostname-override={self.name}",
            f"--node-ip={LOOPBACK}",
            "--v=2",
        ]
        if self.labels:
            args.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in self.labels.items()))
        # The root mount made private first: the bind below must not reach the host's
        # namespace (where / may be shared); the root dir's own mount stays shared.
        script = (
            "mount --make-private / && "
            f"mount --bind {self.device_plugin_dir} {DEVICE_PLUGIN_PATH} && "
            f"mount --bind {self.work / 'containers-logs'} {CONTAINER_LOGS} && "
            'exec "$@"'
        )
        proc = Process("kubelet", self.log_files["kubelet"])
        proc.start(
            ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", script, "sh", *args]
        )
        self.kubelet = proc

    def stop_kubelet(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None

    def restart_kubelet(self) -> None:
        self.stop_kubelet()
        self.start_kubelet()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the Node reports Ready (the kubelet registered, the runtime is up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kubelet is not None and self.kubelet.exited() is not None:
                raise ControlPlaneError(f"kubelet exited:\n{self.kubelet.tail()}")
            if self.ready():
                return
            time.sleep(0.25)
        tail = self.kubelet.tail() if self.kubelet else ""
        raise ControlPlaneError(f"node {self.name} not Ready after {timeout:g} s:\n{tail}")

    def ready(self) -> bool:
        resp = self.cp.request("GET", f"/api/v1/nodes/{self.name}")
        if not resp.ok:
            return False
        status = resp.json().get("status", {})
        if not any(a.get("type") == "InternalIP" for a in status.get("addresses") or []):
            self._publish_address()
            return False
        conditions = status.get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _publish_address(self) -> None:
        # The kubelet refuses a loopback node IP ("nodeIP can't be loopback address") and
        # then leaves the addresses alone; the apiserver reaches it (logs, exec) through
        # the InternalIP, so the node's one address is written here.
        address = {"addresses": [{"type": "InternalIP", "address": LOOPBACK}]}
        self.cp.request(
            "PATCH",
            f"/api/v1/nodes/{self.name}/status",
            {"status": address},
            content_type="application/merge-patch+json",
        )

    # ---------------------------------------------------------------- containerd

    def ctr(self, *args: str, check: bool = True) -> str:
        """ctr against this node's containerd, in the CRI's namespace."""
        out = subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and out.returncode != 0:
            raise ControlPlaneError(f"ctr {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def _start_containerd(self) -> None:
        config = self.work / "containerd.toml"
        config.write_text(_containerd_config(self.work, self.socket))
        (self.work / "cni" / "10-host-network-only.conflist").write_text(json.dumps(CNI_CONFIG))
        proc = Process("containerd", self.log_files["containerd"])
        proc.start(["containerd", "--config", str(config)])
        self.containerd = proc
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.exited() is not None:
                raise ControlPlaneError(f"containerd exited:\n{proc.tail()}")
            if self.socket.exists() and self.ctr("version", check=False):
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"containerd did not answer:\n{proc.tail()}")
            time.sleep(0.1)

    def _import_images(self) -> None:
        images = self.work / "images"
        write_image(images / "test.tar", [TEST_IMAGE])
        write_image(images / "pause.tar", [PAUSE_IMAGE], PAUSE_ENTRYPOINT)
        for tar in ("test.tar", "pause.tar"):
            self.ctr("images", "import", str(images / tar))

    def _kill_tasks(self) -> None:
        """Kill every container this containerd runs: its shims outlive it otherwise."""
        with contextlib.suppress(ControlPlaneError, subprocess.TimeoutExpired):
            ids = self.ctr("tasks", "ls", "--quiet", check=False).split()
            for task in ids:
                self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, check=False)
            for task in ids:
                self.ctr("tasks", "delete", "--force", task, check=False)
            containers = self.ctr("containers", "ls", "--quiet", check=False).split()
            if containers:
                self.ctr("containers", "delete", *containers, check=False)

    # ---------------------------------------------------------------- kubelet

    def _write_kubelet_files(self) -> None:
        certs = self.cp.certs
        cert_dir = self.work / "certs"
        client = certs.ca.issue_client(f"system:node:{self.name}", ("system:nodes",))
        write_kubeconfig(
            self.work / "kubelet.kubeconfig",
            self.cp.url,
            certs.ca.cert_pem,
            client.cert_pem,
            client.key_pem,
            f"system:node:{self.name}",
        )
        serving_cert, serving_key = certs.ca.issue_serving(
            "kubelet", (LOOPBACK, "localhost", self.name)
        ).write(cert_dir, "kubelet")
        (cert_dir / "ca.crt").write_bytes(certs.ca.cert_pem)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": LOOPBACK,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": LOOPBACK,
            "healthzPort": self.healthz_port,
            "tlsCertFile": str(serving_cert),
            "tlsPrivateKeyFile": str(serving_key),
            # The apiserver (logs, exec) comes with a client cert of the run's CA.
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(cert_dir / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            # This host: cgroup v1, no systemd, no QoS hierarchy (see the module's doc).
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "podLogsDir": str(self.work / "pods-logs"),
            # The local images are never garbage-collected (nothing could pull them again).
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            # A shared test machine's disk and memory are not this node's business.
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%"},
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
            "serializeImagePulls": False,
        }
        (self.work / "kubelet-config.yaml").write_text(yaml.safe_dump(config))

    def _share_root_dir(self) -> None:
        # A mount point of its own, shared: what the kubelet mounts under it in its
        # namespace (pod volumes) propagates to the host's, where containerd runs.
        subprocess.run(["mount", "--bind", str(self.root_dir), str(self.root_dir)], check=True)
        subprocess.run(["mount", "--make-shared", str(self.root_dir)], check=True)

    def _unmount_all(self) -> None:
        for point in sorted(_mounts_under(self.work), key=len, reverse=True):
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def _mounts_under(directory: Path) -> list[str]:
    """Mount points at or below directory, from /proc/self/mountinfo."""
    prefix = str(directory.resolve())
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                out.append(point)
    return out
