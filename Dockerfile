# syntax=docker/dockerfile:1
# The gpu-binder image: `gpu-binder run` (the binder and its webhook, deploy/binder) and
# `gpu-binder agent` (the node agent, deploy/agent) — the image the Helm chart defaults to:
#   docker build -t gpu-binder:0.1.0 .
# The package is installed into a virtual environment in a build stage; the final image
# holds that environment and nothing else of the source tree.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml ./
COPY src ./src
RUN python -m venv /opt/gpu-binder \
    && /opt/gpu-binder/bin/pip install --no-cache-dir --upgrade pip \
    && /opt/gpu-binder/bin/pip install --no-cache-dir . \
    && /opt/gpu-binder/bin/gpu-binder --help >/dev/null

FROM python:3.11-slim
ENV PATH=/opt/gpu-binder/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/gpu-binder /opt/gpu-binder
# A numeric non-root user, so the kubelet can check runAsNonRoot (the binder's pods). The
# agent's DaemonSet runs as root on purpose: it writes sysfs reset files.
RUN groupadd --system --gid 65532 gpu-binder \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin \
        gpu-binder
USER 65532:65532
ENTRYPOINT ["gpu-binder"]
CMD ["--help"]
