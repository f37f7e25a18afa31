"""The device-plugin API's gRPC services, wired from the vendored proto's descriptor.

Handlers and call paths come from the descriptor compiled from api.proto, so the method
names, message types and streaming kinds cannot drift from what the kubelet speaks; no
hand-written service stubs are needed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc

from gpu_binder.agent.deviceplugin import api_pb2

# The API version a plugin registers with, and the health words ListAndWatch uses.
VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# Where the kubelet serves Registration and looks for plugin sockets.
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"

Handler = Callable[..., Any]


def _message(name: str) -> Any:
    return getattr(api_pb2, name)


def service_handler(service: str, methods: Mapping[str, Handler]) -> Any:
    """A generic handler serving `methods` (name -> async function) of a proto service."""
    desc = api_pb2.DESCRIPTOR.services_by_name[service]
    known = {m.name: m for m in desc.methods}
    unknown = set(methods) - set(known)
    if unknown:
        raise ValueError(f"{service} has no method {', '.join(sorted(unknown))}")
    handlers = {}
    for name, fn in methods.items():
        m = known[name]
        make = (
            grpc.unary_stream_rpc_method_handler
            if m.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[name] = make(
            fn,
            request_deserializer=_message(m.input_type.name).FromString,
            response_serializer=_message(m.output_type.name).SerializeToString,
        )
    return grpc.method_handlers_generic_handler(desc.full_name, handlers)


def method_path(service: str, method: str) -> str:
    """e.g. /v1beta1.Registration/Register."""
    desc = api_pb2.DESCRIPTOR.services_by_name[service]
    return f"/{desc.full_name}/{desc.methods_by_name[method].name}"


def call(channel: Any, service: str, method: str) -> Any:
    """A client callable for one method of a proto service on a grpc.aio channel."""
    m = api_pb2.DESCRIPTOR.services_by_name[service].methods_by_name[method]
    make = channel.unary_stream if m.server_streaming else channel.unary_unary
    return make(
        method_path(service, method),
        request_serializer=_message(m.input_type.name).SerializeToString,
        response_deserializer=_message(m.output_type.name).FromString,
    )


def unix_target(path: str) -> str:
    """The gRPC address of a Unix socket path."""
    return f"unix:{path}"
