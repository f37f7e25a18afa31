"""How gpu-binder shows GPUs to people, shared by the demo's live view and `kubectl gpu`."""
