"""`gpu-binder run` as processes: one replica reconciles, a killed leader is replaced in
lease time with nothing lost or bound twice, and SIGTERM releases the lease."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from realcluster import BINDER_SA, Fleet, eventually, namespace, uid

from conftest import BinderSetup
from gpu_binder.envtest import free_port
from gpu_binder.kube import KubeClient

pytestmark = pytest.mark.controlplane

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5


class Replica:
    def __init__(self, setup: BinderSetup, lease: str, log_dir: Path) -> None:
        self.identity = f"replica-{uid()}"
        self.metrics_port = free_port()
        self.log = (log_dir / f"{self.identity}.log").open("wb")
        user, groups = BINDER_SA
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpu_binder.cli.main",
                "run",
                f"--kubeconfig={setup.cp.kubeconfig}",
                f"--as={user}",
                f"--as-group={','.join(groups)}",
                "--lease-namespace=gpu-binder",
                f"--lease-name={lease}",
                f"--identity={self.identity}",
                f"--lease-duration={LEASE:g}s",
                f"--renew-deadline={RENEW:g}s",
                f"--retry-period={RETRY * 1000:g}ms",
                "--resync=1s",
                "--webhook-host=127.0.0.1",
                f"--webhook-port={free_port()}",
                f"--tls-cert-file={setup.cert_file}",
                f"--tls-key-file={setup.key_file}",
                "--metrics-host=127.0.0.1",
                f"--metrics-port={self.metrics_port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def metric(self, name: str) -> float:
        """The sum of a metric's samples, 0 while it has none or the replica is down."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return 0.0
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and line[len(name)] in " {"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def replicas(binder_setup: BinderSetup, tmp_path: Path) -> Iterator[list[Replica]]:
    lease = f"run-{uid()}"
    started = [Replica(binder_setup, lease, tmp_path) for _ in range(2)]
    yield started
    for r in started:
        r.stop()


async def _leader(replicas: list[Replica]) -> Replica | None:
    leading = [r for r in replicas if r.metric("gpu_binder_leader") == 1]
    return (
        leading[0] if len(leading) == 1 and leading[0].metric("gpu_binder_passes_total") else None
    )


async def test_one_replica_reconciles_and_a_killed_leader_is_replaced_in_lease_time(
    binder_setup: BinderSetup, admin: KubeClient, replicas: list[Replica]
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(binder_setup.cp)
    leader = await eventually(lambda: _leader(replicas), timeout=30, what="one leader")
    (standby,) = [r for r in replicas if r is not leader]
    await fleet.create_vm(ns, "first", gpus=2)
    first = await eventually(lambda: _bound(fleet, ns, "first", 2), what="first bound")
    await asyncio.sleep(1)
    assert standby.metric("gpu_binder_passes_total") == 0
    assert standby.metric("gpu_binder_leader") == 0

    leader.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    await eventually(lambda: _leader([standby]), timeout=15, what="the standby leads")
    took = time.monotonic() - killed

    assert took <= LEASE + RETRY * 1.2 + 1.5, took
    await fleet.create_vm(ns, "second", gpus=2)
    second = await eventually(lambda: _bound(fleet, ns, "second", 2), what="second bound")
    kept = {d.metadata.name: d.status.binding for d in await fleet.set_of(ns, "first")}
    assert kept == {d.metadata.name: d.status.binding for d in first}
    assert not kept.keys() & {d.metadata.name for d in second}


async def test_sigterm_shuts_down_cleanly_and_releases_the_lease(
    admin: KubeClient, replicas: list[Replica]
) -> None:
    leader = await eventually(lambda: _leader(replicas), timeout=30, what="one leader")
    (standby,) = [r for r in replicas if r is not leader]

    leader.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(leader.proc.wait, 10)
    stopped = time.monotonic()

    assert code == 0
    await eventually(lambda: _leader([standby]), timeout=15, what="the standby leads")
    # A released lease is taken within a retry period, not after a lease duration.
    assert time.monotonic() - stopped < LEASE


async def _bound(fleet: Fleet, ns: str, vm: str, n: int) -> list:  # type: ignore[type-arg]
    devices = await fleet.set_of(ns, vm)
    return sorted(devices, key=lambda d: d.metadata.name) if len(devices) == n else []
