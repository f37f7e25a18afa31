"""The node agent (DESIGN §5): GPUs from sysfs into GPUDevices, resets, the device plugin."""
