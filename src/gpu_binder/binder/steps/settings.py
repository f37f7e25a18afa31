"""Settings: the KubeVirt CR's permitted host devices, rendered from classes and slots."""

from __future__ import annotations

from typing import Any

from gpu_binder.binder.context import Context


def render(ctx: Context) -> list[dict[str, Any]]:
    """pciHostDevices: every slot resource in use for Device classes, the class for Node."""
    world = ctx.world
    out: list[dict[str, Any]] = []
    slots = world.devices.slot_users
    for cls in sorted(world.classes.values(), key=lambda c: c.metadata.name):
        vendor = cls.spec.match.vendor_id.removeprefix("0x").upper()
        if cls.spec.pinning == "Node":
            for device_id in cls.spec.match.device_ids or ("*",):
                out.append(
                    {
                        "pciVendorSelector": f"{vendor}:{device_id.removeprefix('0x').upper()}",
                        "resourceName": cls.spec.resource_name,
                        "externalResourceProvider": True,
                    }
                )
            continue
        prefix = f"gpu.cozystack.io/{vendor.lower()}-"
        for resource in sorted(slots):
            if not resource.startswith(prefix):
                continue
            device_id = resource[len(prefix) :].split("-s")[0]
            if cls.spec.match.device_ids and f"0x{device_id}" not in cls.spec.match.device_ids:
                continue
            out.append(
                {
                    "pciVendorSelector": f"{vendor}:{device_id.upper()}",
                    "resourceName": resource,
                    "externalResourceProvider": True,
                }
            )
    return _unique(out)


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item["resourceName"] in seen:
            continue
        seen.add(item["resourceName"])
        out.append(item)
    return out


def settings(ctx: Context) -> None:
    key = f"{ctx.config.kubevirt_namespace}/{ctx.config.kubevirt_name}"
    current = ctx.world.kubevirt.get(key)
    if current is None:
        return  # KubeVirt is not installed, or its CR not yet seen: nothing to render into
    wanted = render(ctx)
    spec = current.raw.get("spec") or {}
    have = ((spec.get("configuration") or {}).get("permittedHostDevices") or {}).get(
        "pciHostDevices"
    )
    if have == wanted:
        return
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": ctx.config.kubevirt_name, "namespace": ctx.config.kubevirt_namespace},
        "spec": {"configuration": {"permittedHostDevices": {"pciHostDevices": wanted}}},
    }
    ctx.plan.write("apply", _Applied(key, body))


class _Applied:
    """A server-side apply body, keyed like the objects the plan keys writes by."""

    def __init__(self, key: str, body: dict[str, Any]) -> None:
        from gpu_binder.api.meta import ObjectMeta

        ns, _, name = key.partition("/")
        self.metadata = ObjectMeta(name=name, namespace=ns)
        self.body = body
