"""The committed Python messages are exactly what protoc makes of the vendored proto."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from gpu_binder.agent.deviceplugin import api_pb2

PROTO = Path(api_pb2.__file__).with_name("api.proto")


def test_api_pb2_matches_the_vendored_proto(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc")
    src = PROTO.parents[3]
    out = tmp_path / "api.desc"
    assert protoc.main(["protoc", f"-I{src}", f"--descriptor_set_out={out}", str(PROTO)]) == 0
    compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    # The Python generator leaves out the JSON names it can derive again.
    without_json_names(compiled.message_type)
    committed = descriptor_pb2.FileDescriptorProto()
    api_pb2.DESCRIPTOR.CopyToProto(committed)
    assert committed == compiled


def without_json_names(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for m in messages:
        for f in m.field:
            f.ClearField("json_name")
        without_json_names(m.nested_type)


def test_the_services_are_the_ones_the_kubelet_calls() -> None:
    services = api_pb2.DESCRIPTOR.services_by_name
    assert services["Registration"].full_name == "v1beta1.Registration"
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
