"""The order a starting VMI runs for: its VirtualMachine (the controller owner), or the VMI
itself when it has none."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_binder.api.meta import controller_or_first
from gpu_binder.webhook.review import AdmissionRequest

VM_KIND = "VirtualMachine"


@dataclass(frozen=True, slots=True)
class Target:
    """The order a starting VMI runs for: its VirtualMachine, or the VMI itself."""

    namespace: str
    vm_name: str
    # Empty for a standalone VMI: the API server gives it a uid only after admission.
    vm_uid: str
    vmi_name: str
    owned: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.vm_name}"

    def bound_to_it(self, bound_uid: str) -> bool:
        """Whether a device bound under this uid is this order's: a VM's by its uid (or
        none yet); a standalone VMI has no uid at admission, so any uid is another's."""
        if not self.owned:
            return not bound_uid
        return not (self.vm_uid and bound_uid and bound_uid != self.vm_uid)


def target_of(request: AdmissionRequest) -> Target | str:
    """The order the VMI runs for, or why it cannot be told (as a denial message)."""
    meta = (request.object or {}).get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    vmi_name = meta.get("name")
    if not isinstance(vmi_name, str) or not vmi_name:
        return "a VMI with GPUs needs metadata.name: generateName is not supported"
    if not request.namespace:
        return "a VMI with GPUs needs a namespace"
    malformed = malformed_owners(meta.get("ownerReferences"))
    if malformed:
        return malformed
    owner = vm_owner(meta.get("ownerReferences"))
    if owner is None:
        return Target(request.namespace, vmi_name, "", vmi_name, owned=False)
    name, uid = owner
    return Target(request.namespace, name, uid, vmi_name, owned=True)


def malformed_owners(refs: object) -> str:
    """Why the API server will refuse these ownerReferences, or "".

    Mutating webhooks run before the API server validates the object, so a VMI it then
    refuses (422) would leave the set bound for it to an order that never appears (issue
    11, attack 2). The checks are the API server's own, apimachinery's
    pkg/api/validation/objectmeta.go ValidateOwnerReferences: apiVersion, kind, name and
    uid present, and at most one controller.
    """
    if refs is None:
        return ""
    if not isinstance(refs, list):
        return "metadata.ownerReferences must be a list"
    controllers: list[str] = []
    for i, ref in enumerate(refs):
        at = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            return f"{at} must be an object"
        version = str(ref.get("apiVersion") or "").rpartition("/")[2]
        for field, value in (
            ("apiVersion", version),
            ("kind", ref.get("kind")),
            ("name", ref.get("name")),
            ("uid", ref.get("uid")),
        ):
            if not isinstance(value, str) or not value:
                return (
                    f"{at}.{field} must not be empty: the API server refuses the VMI after "
                    "admission, so gpu-binder binds no GPUs for it"
                )
        if ref.get("controller") is True:
            controllers.append(f"{ref['kind']}/{ref['name']}")
    if len(controllers) > 1:
        return (
            "only one ownerReference may have controller: true, found "
            f"{' and '.join(controllers)}: the API server refuses the VMI after admission, so "
            "gpu-binder binds no GPUs for it"
        )
    return ""


def vm_owner(refs: object) -> tuple[str, str] | None:
    """(name, uid) of the VirtualMachine owner: the controller one, else the first."""
    if not isinstance(refs, list):
        return None
    owners = [
        r
        for r in refs
        if isinstance(r, dict) and r.get("kind") == VM_KIND and isinstance(r.get("name"), str)
    ]
    best = controller_or_first(owners, lambda r: r.get("controller") is True)
    if best is None:
        return None
    return str(best["name"]), str(best.get("uid") or "")


def vmi_name(request: AdmissionRequest) -> str:
    """The VMI's name as the request carries it ("" when it has none)."""
    meta = (request.object or {}).get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""
