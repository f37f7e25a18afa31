"""Locating (and, when needed, building) Prometheus's ``promtool`` for the metric and alert
tests: `promtool check metrics` lints the binder's exposition against Prometheus's naming
conventions, `promtool check rules` and `promtool test rules` the chart's alerts.

Found or built as every Go tool of the tests is (:mod:`gpu_binder.envtest.gotool`):
``GPU_BINDER_PROMTOOL``, else ``~/.cache/gpu-binder/promtool/<version>/promtool``, else ``go
install github.com/prometheus/prometheus/cmd/promtool@<version>`` once per machine (it
brings every service discovery's SDK: ten minutes or more on 2 cores).
``GPU_BINDER_PROMTOOL_VERSION`` picks another release than :data:`DEFAULT_PROMTOOL_VERSION`
(the Go module's v0.316.0 is Prometheus v3.16.0).
"""

from __future__ import annotations

from .gotool import GoTool

DEFAULT_PROMTOOL_VERSION = "v0.316.0"
MODULE = "github.com/prometheus/prometheus"

PROMTOOL = GoTool(
    "promtool",
    MODULE,
    f"{MODULE}/cmd/promtool",
    DEFAULT_PROMTOOL_VERSION,
    duration="ten minutes or more on 2 cores",
)

if __name__ == "__main__":
    raise SystemExit(PROMTOOL.main())
