"""The kubelet device-plugin API v1beta1 for the slot resources of `pinning: Device` classes."""

from gpu_binder.agent.deviceplugin.manager import DevicePluginManager, socket_name
from gpu_binder.agent.deviceplugin.plugin import SlotDevice, SlotPlugin

__all__ = ["DevicePluginManager", "SlotDevice", "SlotPlugin", "socket_name"]
