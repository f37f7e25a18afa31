"""The KubeVirt CR's configuration as the binder reads it: what its permittedHostDevices
means for the classes, and its evictionStrategy; the queries the settings, status and
drains steps, placement and the webhook share.

virt-handler starts a device plugin of its own for every `pciHostDevices` entry without
`externalResourceProvider: true`, serving every vfio-pci device whose vendor:device equals
its `pciVendorSelector` under its `resourceName` (kubevirt/kubevirt
`pkg/virt-handler/device-manager/device_controller.go`, updatePermittedHostDevicePlugins;
`pci_device.go`, discoverPermittedHostPCIDevices). For a `pinning: Device` class, whose
GPUs the node agent serves one slot resource each, such an entry serves them a second
time, as a pool: a VMI naming it gets any of them, another tenant's pinned GPU included.
The binder then refuses to serve the class (`served_twice`): it binds none of its GPUs
anew until the entry is fixed; VMIs running on them are left alone.

With no `permittedHostDevices` at all, KubeVirt permits every device name a plugin serves
(`pkg/virt-controller/services/renderresources.go`, validatePermittedHostDevices skips the
check); once a list exists it permits only what is listed. A list the binder writes into a
CR that had none therefore restricts the operator's other devices; the settings step marks
the CR (CREATED_ANNOTATION) and the classes say so (`list_created`).
"""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.binder.config import Config
from gpu_binder.cache.world import World

# On the KubeVirt CR: the binder created its permittedHostDevices (there was none).
CREATED_ANNOTATION = "gpu.cozystack.io/permitted-host-devices-created"


def kubevirt_cr(world: World, config: Config) -> KubeVirt | None:
    return world.kubevirt.get(f"{config.kubevirt_namespace}/{config.kubevirt_name}")


def configuration(kv: KubeVirt | None) -> dict[str, Any]:
    """The CR's spec.configuration ({} when there is no CR or none)."""
    spec = (kv.raw.get("spec") or {}) if kv is not None else {}
    found = spec.get("configuration") if isinstance(spec, dict) else None
    return found if isinstance(found, dict) else {}


def eviction_strategy(world: World, config: Config) -> str:
    """The cluster's evictionStrategy, for VMIs that set none: KubeVirt's default is None
    (pkg/virt-config/configuration.go)."""
    value = configuration(kubevirt_cr(world, config)).get("evictionStrategy")
    return str(value) if value else "None"


def pci_host_devices(kv: KubeVirt | None) -> list[Any] | None:
    """The CR's pciHostDevices; None when it has no permittedHostDevices at all."""
    permitted = configuration(kv).get("permittedHostDevices")
    if not isinstance(permitted, dict):
        return None
    entries = permitted.get("pciHostDevices")
    return entries if isinstance(entries, list) else []


def served_twice(world: World, config: Config) -> dict[str, str]:
    """Device classes whose GPUs an operator's entry has virt-handler serve again: class
    name -> why, in words an operator acts on. Cached per CR object and class generation."""
    kv = kubevirt_cr(world, config)
    cached = world.served_twice_cache
    if cached is not None and cached[0] is kv and cached[1] == world.class_gen:
        return cached[2]
    out: dict[str, str] = {}
    for entry in pci_host_devices(kv) or ():
        if not isinstance(entry, dict) or entry.get("externalResourceProvider") is True:
            continue
        selector = str(entry.get("pciVendorSelector") or "")
        vendor, _, device = selector.lower().partition(":")
        resource = str(entry.get("resourceName") or "")
        for cls in world.classes.values():
            match = cls.spec.match
            ids = {i.removeprefix("0x") for i in match.device_ids}
            if cls.spec.pinning != "Device" or match.vendor_id.removeprefix("0x") != vendor:
                continue
            if ids and device not in ids:
                continue
            out.setdefault(
                cls.metadata.name,
                f"the KubeVirt CR's permittedHostDevices entry {selector} ({resource}) has no "
                f"externalResourceProvider: true, so virt-handler serves this class's GPUs a "
                f"second time, as {resource}, to any VMI naming it; gpu-binder binds none of "
                "them anew until that entry says externalResourceProvider: true or goes",
            )
    world.served_twice_cache = (kv, world.class_gen, out)
    return out


def list_created(world: World, config: Config) -> str:
    """Why the CR's permittedHostDevices now restricts what KubeVirt permits, when the
    binder created it; "" when the CR had a list of its own."""
    kv = kubevirt_cr(world, config)
    if kv is None or not kv.metadata.annotations.get(CREATED_ANNOTATION):
        return ""
    return (
        f"gpu-binder created spec.configuration.permittedHostDevices in KubeVirt CR "
        f"{kv.metadata.namespace}/{kv.metadata.name}, which had none: KubeVirt now permits "
        "only the host devices listed there (before, any device a plugin served); list the "
        "cluster's other GPUs and host devices there too"
    )
