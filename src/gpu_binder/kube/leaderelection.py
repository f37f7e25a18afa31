"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules and timings.

A candidate takes the lease when it is free or its holder has not renewed it for
leaseDuration, judged by this process's own clock from when it last saw the lease change
(never by comparing clocks across machines). The leader renews every retryPeriod; it is
the leader only while its last successful renewal is younger than renewDeadline, so
`is_leader()` turns false the moment that passes, before any other candidate may take
the lease (renewDeadline < leaseDuration). A clean shutdown releases the lease at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpu_binder.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from gpu_binder.kube.client import KubeClient

log = logging.getLogger(__name__)

JITTER = 1.2


@dataclass(frozen=True, slots=True)
class Timings:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * JITTER > 0:
            raise ValueError(
                "leader election needs leaseDuration > renewDeadline > retryPeriod × 1.2 > 0"
            )


def micro_time(t: datetime) -> str:
    """metav1.MicroTime: UTC with microseconds, as client-go writes it."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        timings: Timings | None = None,
        *,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings or Timings()
        self.on_started = on_started or (lambda: None)
        self.on_stopped = on_stopped or (lambda: None)
        self._now = monotonic
        self._renewed_at: float | None = None
        # The lease as last read, and when (by our clock) it last changed.
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self.transitions_seen = 0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def is_leader(self) -> bool:
        """True only while the last renewal is younger than the renew deadline (the fence)."""
        renewed = self._renewed_at
        return renewed is not None and self._now() - renewed < self.timings.renew_deadline

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign, lead while renewals succeed, campaign again after losing; until stop."""
        try:
            while not stop.is_set():
                await self._acquire(stop)
                if stop.is_set():
                    break
                log.info("became leader", extra={"lease": self.name, "identity": self.identity})
                self.on_started()
                await self._renew(stop)
                self.on_stopped()
                if not stop.is_set():
                    log.warning("lost the lease", extra={"lease": self.name})
        finally:
            if self.is_leader():
                self.on_stopped()
                await self.release()
            self._renewed_at = None

    async def _acquire(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if await self.try_acquire_or_renew():
                return
            await _wait(stop, self.timings.retry_period * random.uniform(1.0, JITTER))

    async def _renew(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            deadline = (self._renewed_at or self._now()) + self.timings.renew_deadline
            renewed = False
            while not stop.is_set() and self._now() < deadline:
                try:
                    async with asyncio.timeout(max(0.01, deadline - self._now())):
                        renewed = await self.try_acquire_or_renew()
                except TimeoutError:
                    renewed = False
                if renewed:
                    break
                await _wait(stop, min(self.timings.retry_period, max(0, deadline - self._now())))
            if not renewed:
                self._renewed_at = None
                return
            await _wait(stop, self.timings.retry_period)

    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True when we hold the lease now."""
        now = datetime.now(UTC)
        started = self._now()
        try:
            lease = await self.client.request("GET", self.path)
        except NotFound:
            return await self._create(now, started)
        except ApiError as e:
            log.warning("reading lease %s: %s", self.name, e)
            return False
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        expired = self._observed_at + float(spec.get("leaseDurationSeconds") or 0) <= started
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": _seconds(self.timings.lease_duration),
            "acquireTime": spec.get("acquireTime") or micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }
        if holder != self.identity:
            new_spec["acquireTime"] = micro_time(now)
            # client-go counts every change of holder, a released lease's included.
            new_spec["leaseTransitions"] = transitions + 1
        body = {**lease, "spec": new_spec}
        try:
            updated = await self.client.request("PUT", self.path, body)
        except (Conflict, NotFound):
            return False
        except ApiError as e:
            log.warning("renewing lease %s: %s", self.name, e)
            return False
        self._observe(updated.get("spec") or {})
        self._renewed_at = started
        if holder != self.identity:
            self.transitions_seen += 1
        return True

    async def _create(self, now: datetime, started: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": _seconds(self.timings.lease_duration),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            },
        }
        collection = self.path.rpartition("/")[0]
        try:
            created = await self.client.request("POST", collection, body)
        except (AlreadyExists, Conflict):
            return False
        except ApiError as e:
            log.warning("creating lease %s: %s", self.name, e)
            return False
        self._observe(created.get("spec") or {})
        self._renewed_at = started
        self.transitions_seen += 1
        return True

    async def release(self) -> None:
        """Give the lease up so the next candidate need not wait for it to expire."""
        try:
            lease = await self.client.request("GET", self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = micro_time(datetime.now(UTC))
            released = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": int(spec.get("leaseTransitions") or 0),
            }
            await self.client.request("PUT", self.path, {**lease, "spec": released})
            log.info("released the lease", extra={"lease": self.name})
        except ApiError as e:
            log.warning("releasing lease %s: %s", self.name, e)

    def _observe(self, spec: dict[str, Any]) -> None:
        if spec != self._observed:
            self._observed = spec
            self._observed_at = self._now()


def _seconds(value: float) -> int:
    return max(1, round(value))


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        pass
