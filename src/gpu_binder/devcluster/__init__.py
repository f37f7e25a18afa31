"""A development cluster: the local control plane with simulated GPU nodes and gpu-binder."""
