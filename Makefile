# The two commands a newcomer needs: `make demo` and `make test`.
# Both create the project's virtual environment first (quickly when it exists).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit venv clean dev-cluster crds helm proto

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

# Regenerate deploy/crds/ and deploy/kubevirt/ from the models (a test checks they match),
# and copy deploy/crds/ into the Helm chart, whose crds/ must hold the same files (helm
# packages no symlinks; tests/kube/test_chart_files.py checks the copy).
CHART := deploy/helm/gpu-binder
crds: $(STAMP)
	$(BIN)/python -m gpu_binder.api.crds deploy/crds
	rm -f $(CHART)/crds/*.yaml
	cp deploy/crds/*.yaml $(CHART)/crds/

# helm, built once from the Go module proxy into ~/.cache/gpu-binder/helm/<version>/ (or
# $$GPU_BINDER_HELM), then the chart linted and rendered with its defaults.
helm: $(STAMP)
	@HELM="$$($(BIN)/python -m gpu_binder.envtest.helm)" && \
	"$$HELM" lint --strict $(CHART) && \
	"$$HELM" template gpu-binder $(CHART) --namespace gpu-binder >/dev/null && \
	echo "chart OK; helm is $$HELM"

# A local API server with simulated GPU nodes, gpu-binder and its webhook running against
# it; prints the kubeconfig to use with kubectl (Ctrl-C stops everything).
# ARGS="--kwok 20" adds the real scheduler and controller-manager and 20 KWOK GPU nodes,
# ARGS="--kubelet" a real node (containerd + kubelet) with the agent as its device plugin.
dev-cluster: $(STAMP)
	$(BIN)/python -m gpu_binder.devcluster $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

# Regenerate the device-plugin API's Python messages from the vendored proto (committed;
# tests/agent/test_agent_proto.py checks they match it).
proto: $(STAMP)
	PYTHON=$(BIN)/python scripts/gen-deviceplugin-proto.sh
