"""Finalizers, and each device's class and readiness: the state placement starts from."""

from __future__ import annotations

from gpu_binder.api.meta import Condition, utc
from gpu_binder.api.types import FINALIZER, GPUDevice, Phase
from gpu_binder.binder.context import Context
from gpu_binder.binder.queries import matching_classes


def finalizers(ctx: Context) -> None:
    """Every device carries the finalizer, so a deleted device stays until nothing runs on it."""
    devices = ctx.world.devices
    for name in sorted(devices.missing_finalizer - devices.deleted):
        d = devices.by_name[name]
        meta = d.metadata.model_copy(update={"finalizers": (*d.metadata.finalizers, FINALIZER)})
        ctx.plan.device_update(d.model_copy(update={"metadata": meta}))


def classify(ctx: Context) -> None:
    """A device's class follows its spec; a new device starts Available, a reset one too."""
    world = ctx.world
    devices = world.devices
    for name in sorted(world.dirty | devices.unclassified):
        d = devices.get(name)
        if d is None:
            continue
        classes = matching_classes(world, d)
        class_name = classes[0].metadata.name if len(classes) == 1 else ""
        phase = d.status.phase or Phase.AVAILABLE
        conditions = d.status.conditions
        if len(classes) > 1:
            names = ", ".join(sorted(c.metadata.name for c in classes))
            conditions = _condition(ctx, d, "Ambiguous", f"matches classes {names}")
        else:
            # The ambiguity was resolved (a class changed or went): say so no longer.
            conditions = tuple(c for c in conditions if c.type != "Classified")
        if d.status.binding is not None and d.status.class_name:
            class_name = d.status.class_name  # a bound device keeps the class it was bound as
        if (
            class_name != d.status.class_name
            or phase != d.status.phase
            or conditions != (d.status.conditions)
        ):
            status = d.status.model_copy(
                update={"class_name": class_name, "phase": phase, "conditions": conditions}
            )
            ctx.plan.device_status(d.model_copy(update={"status": status}))
    world.dirty.clear()
    for name in sorted(devices.cleaning):
        d = devices.by_name[name]
        if cleaned(d):
            status = d.status.model_copy(update={"phase": Phase.AVAILABLE})
            ctx.plan.device_status(d.model_copy(update={"status": status}))


def cleaned(d: GPUDevice) -> bool:
    """Whether the agent reset d for its current release (invariant 4).

    The agent echoes the releasedAt it saw into spec.lastResetFor when it resets, so the
    binder's own timestamp comes back and no two machines' clocks are compared.
    """
    released, echoed, reset = d.status.released_at, d.spec.last_reset_for, d.spec.last_reset
    if released is not None and echoed is not None:
        return utc(echoed) == utc(released)
    if reset is None:
        return False
    if released is None:
        return True  # a Cleaning that names no release: any reset will do
    # An agent older than lastResetFor records lastReset only: accepted by time so that a
    # rolling upgrade strands no device in Cleaning, with the old rule's caveat that a
    # node clock running ahead can pass off an earlier reset as this release's.
    return utc(reset) >= utc(released)


def _condition(ctx: Context, d: GPUDevice, reason: str, message: str) -> tuple[Condition, ...]:
    from gpu_binder.api.meta import set_condition

    return set_condition(
        d.status.conditions,
        Condition(
            type="Classified",
            status="False",
            reason=reason,
            message=message,
            last_transition_time=ctx.now,
        ),
    )
