#!/bin/sh
# Regenerates the device-plugin API's Python messages from the vendored proto.
# The output is committed so that installing gpu-binder needs no protoc (grpcio-tools
# is a dev dependency only); tests/agent/test_proto.py checks it matches the proto.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -I src --python_out=src --pyi_out=src \
  src/gpu_binder/agent/deviceplugin/api.proto
