"""A view of a core/v1 ResourceQuota: the hard limits a namespace's quota sets.

gpu-binder enforces a quota's limits on each GPU class's resourceName (binder.quota); it
reads `spec.hard` as the operator wrote it (the API server keeps a quantity's own
spelling) and whether the quota is scoped, which it does not enforce (a scope selects
pods, and gpu-binder counts a namespace's GPUs, not its pods').
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_binder.api.meta import ObjectMeta


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    metadata: ObjectMeta
    # spec.hard: resource name (e.g. requests.nvidia.com/GH100_H100_SXM5_80GB) -> quantity.
    hard: dict[str, str] = field(default_factory=dict)
    # spec.scopes or spec.scopeSelector: the quota counts only the pods they select.
    scoped: bool = False
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ResourceQuota:
        spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        hard = spec.get("hard") if isinstance(spec.get("hard"), dict) else {}
        assert isinstance(hard, dict)
        return cls(
            metadata=ObjectMeta.model_validate(raw.get("metadata") or {}),
            hard={str(k): str(v) for k, v in hard.items()},
            scoped=bool(spec.get("scopes") or spec.get("scopeSelector")),
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        raw = {"apiVersion": "v1", "kind": "ResourceQuota", **self.raw}
        return {**raw, "metadata": self.metadata.to_dict()}

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"
