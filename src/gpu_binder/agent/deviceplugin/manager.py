"""Serving the slot resources to the kubelet: one socket per resource, registered and kept.

The kubelet talks to a plugin per resource name, each on its own Unix socket in its
device-plugin directory. When the kubelet restarts it deletes every socket there and
forgets all plugins, so a watchdog notices a missing socket or a new kubelet.sock and
serves and registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gpu_binder.agent.deviceplugin import api_pb2
from gpu_binder.agent.deviceplugin.plugin import VFIO_DIR, SlotDevice, SlotPlugin
from gpu_binder.agent.deviceplugin.rpc import KUBELET_SOCKET, VERSION, call, unix_target

# How long a retired plugin waits for its streams to carry the empty list.
RETIRE_TIMEOUT = 5.0

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Served:
    plugin: SlotPlugin
    socket: Path
    server: Any = None
    # The identity of the kubelet.sock we registered with; None while not registered.
    registered_with: tuple[int, int, int] | None = None
    last_error: str = ""


def socket_name(resource: str, prefix: str = "gpu-binder") -> str:
    """e.g. gpu-binder-10de-2330-s3.sock for gpu.cozystack.io/10de-2330-s3."""
    return f"{prefix}-{resource.rpartition('/')[2]}.sock"


class DevicePluginManager:
    """Starts, updates, re-registers and stops one SlotPlugin per slot resource."""

    def __init__(
        self,
        plugin_dir: Path,
        *,
        prefix: str = "gpu-binder",
        register_timeout: float = 5.0,
        host_vfio_dir: Path = VFIO_DIR,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.host_vfio_dir = host_vfio_dir
        self.kubelet_socket = plugin_dir / KUBELET_SOCKET
        self.prefix = prefix
        self.register_timeout = register_timeout
        # How many registrations the kubelet accepted: tests and metrics read it.
        self.registrations = 0
        self._served: dict[str, _Served] = {}
        self._lock = asyncio.Lock()

    @property
    def resources(self) -> list[str]:
        return sorted(self._served)

    def registered(self, resource: str) -> bool:
        s = self._served.get(resource)
        return s is not None and s.registered_with is not None

    async def update(self, devices: Iterable[SlotDevice]) -> None:
        """Serve exactly these devices: start new ones, push changes, retire the rest."""
        async with self._lock:
            wanted = {d.resource: d for d in devices}
            for resource in [r for r in self._served if r not in wanted]:
                await self._stop(self._served.pop(resource), retire=True)
            for resource, device in sorted(wanted.items()):
                served = self._served.get(resource)
                if served is not None:
                    await served.plugin.set_device(device)
                    continue
                socket = self.plugin_dir / socket_name(resource, self.prefix)
                served = _Served(plugin=SlotPlugin(device, self.host_vfio_dir), socket=socket)
                self._served[resource] = served
                await self._serve(served)
                await self._register(served, self._kubelet_identity())

    async def check(self) -> None:
        """One watchdog tick: re-serve removed sockets, register where not registered."""
        async with self._lock:
            kubelet = self._kubelet_identity()
            for served in self._served.values():
                if not served.socket.exists():
                    log.info(
                        "%s: socket %s was removed; serving again",
                        served.plugin.resource,
                        served.socket,
                    )
                    await self._serve(served)
                    served.registered_with = None
                if served.registered_with != kubelet:
                    await self._register(served, kubelet)

    async def watch(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        """Run the watchdog until stop is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if not stop.is_set():
                await self.check()

    async def close(self) -> None:
        """Stop serving without retiring: the GPUs are still there, only the agent stops."""
        async with self._lock:
            for served in self._served.values():
                await self._stop(served, retire=False)
            self._served.clear()

    def _kubelet_identity(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.kubelet_socket)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_ctime_ns)

    async def _serve(self, served: _Served) -> None:
        if served.server is not None:
            await served.server.stop(grace=None)
        with contextlib.suppress(FileNotFoundError):
            served.socket.unlink()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((served.plugin.handler(),))
        server.add_insecure_port(unix_target(str(served.socket)))
        await server.start()
        served.server = server

    async def _register(self, served: _Served, kubelet: tuple[int, int, int] | None) -> None:
        if kubelet is None:
            served.registered_with = None
            return
        request = api_pb2.RegisterRequest(
            version=VERSION,
            endpoint=served.socket.name,
            resource_name=served.plugin.resource,
            options=api_pb2.DevicePluginOptions(),
        )
        try:
            async with grpc.aio.insecure_channel(unix_target(str(self.kubelet_socket))) as ch:
                register = call(ch, "Registration", "Register")
                await register(request, timeout=self.register_timeout)
        except grpc.aio.AioRpcError as e:
            served.registered_with = None
            error = f"{e.code().name}: {e.details()}"
            if error != served.last_error:
                log.warning(
                    "%s: the kubelet refused registration (%s); retrying",
                    served.plugin.resource,
                    error,
                )
            served.last_error = error
            return
        served.registered_with = kubelet
        served.last_error = ""
        self.registrations += 1
        log.info(
            "%s: registered with the kubelet as %s", served.plugin.resource, served.socket.name
        )

    async def _stop(self, served: _Served, *, retire: bool) -> None:
        if retire:
            await served.plugin.retire()
            # The streams end once they carried the empty list to the kubelet: a fixed
            # grace cut them off first on a busy node (the kubelet saw a broken stream).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(served.plugin.drained(), RETIRE_TIMEOUT)
        if served.server is not None:
            await served.server.stop(grace=0.5 if retire else None)
            served.server = None
        with contextlib.suppress(FileNotFoundError):
            served.socket.unlink()
