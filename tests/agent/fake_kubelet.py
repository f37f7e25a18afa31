"""A fake kubelet: the Registration service on kubelet.sock, built from the same proto, and
a client that talks to a plugin the way the kubelet's device manager does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from gpu_binder.agent.deviceplugin import api_pb2
from gpu_binder.agent.deviceplugin.rpc import VERSION, call, service_handler, unix_target


class FakeKubelet:
    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.registrations: asyncio.Queue[api_pb2.RegisterRequest] = asyncio.Queue()
        # What each plugin answered to GetDevicePluginOptions, by resource name.
        self.options: dict[str, api_pb2.DevicePluginOptions] = {}
        self._server: Any = None

    async def start(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (service_handler("Registration", {"Register": self._register}),)
        )
        server.add_insecure_port(unix_target(str(self.socket)))
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    async def restart(self) -> None:
        """As the kubelet does on start: every socket in its directory is removed."""
        await self.stop()
        for f in self.plugin_dir.iterdir():
            f.unlink()
        await self.start()

    async def _register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:
        if request.version != VERSION:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version")
        # Like the kubelet, dial the plugin back before accepting it.
        async with self.plugin(request.endpoint) as ch:
            options = call(ch, "DevicePlugin", "GetDevicePluginOptions")
            self.options[request.resource_name] = await options(api_pb2.Empty(), timeout=5)
        self.registrations.put_nowait(request)
        return api_pb2.Empty()

    async def next_registration(self, timeout: float = 5.0) -> api_pb2.RegisterRequest:
        return await asyncio.wait_for(self.registrations.get(), timeout)

    @contextlib.asynccontextmanager
    async def plugin(self, endpoint: str) -> AsyncIterator[Any]:
        """A channel to a registered plugin's socket."""
        async with grpc.aio.insecure_channel(unix_target(str(self.plugin_dir / endpoint))) as ch:
            yield ch

    @staticmethod
    def list_and_watch(channel: Any) -> Any:
        return call(channel, "DevicePlugin", "ListAndWatch")(api_pb2.Empty())

    @staticmethod
    async def allocate(channel: Any, *ids: str) -> api_pb2.AllocateResponse:
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(ids))]
        )
        response: api_pb2.AllocateResponse = await call(channel, "DevicePlugin", "Allocate")(
            request, timeout=5
        )
        return response
