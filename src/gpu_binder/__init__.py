"""gpu-binder: pins physical GPUs to KubeVirt virtual machines on Kubernetes."""

__version__ = "0.1.0"
