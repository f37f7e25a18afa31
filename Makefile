# The two commands a newcomer needs: `make demo` and `make test`.
# Both create the project's virtual environment first (quickly when it exists).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit venv clean dev-cluster crds proto

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpu-binder demo

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

# Regenerate deploy/crds/ and deploy/kubevirt/ from the models (a test checks they match).
crds: $(STAMP)
	$(BIN)/python -m gpu_binder.api.crds deploy/crds

# A local API server with simulated GPU nodes, gpu-binder and its webhook running against
# it; prints the kubeconfig to use with kubectl (Ctrl-C stops everything).
dev-cluster: $(STAMP)
	$(BIN)/python -m gpu_binder.devcluster

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

# Regenerate the device-plugin API's Python messages from the vendored proto (committed;
# tests/agent/test_agent_proto.py checks they match it).
proto: $(STAMP)
	PYTHON=$(BIN)/python scripts/gen-deviceplugin-proto.sh
