"""The `gpu-binder` command line."""
