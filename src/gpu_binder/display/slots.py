"""A node's GPU slots as one glyph each, coloured by phase on a terminal and a letter per
phase when there is none (piped, or NO_COLOR), so either reads without a legend lookup."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text

from gpu_binder.api.types import GPUDevice, Phase

GLYPH = "■"
COLOURS = {
    Phase.AVAILABLE: "green",
    Phase.BOUND: "yellow",
    Phase.ATTACHED: "bold magenta",
    Phase.LOST: "bold red",
    Phase.CLEANING: "cyan",
    Phase.RELEASING: "red",
}
LETTERS = {
    Phase.AVAILABLE: ".",
    Phase.BOUND: "b",
    Phase.ATTACHED: "A",
    Phase.LOST: "L",
    Phase.CLEANING: "c",
    Phase.RELEASING: "r",
}
# A device no class claims yet (no phase): nobody can order it.
UNCLASSIFIED_COLOUR = "dim"
UNCLASSIFIED_LETTER = "?"


def by_slot(devices: Iterable[GPUDevice]) -> list[GPUDevice]:
    """A node's devices in slot order (the agent's numbering), PCI address for ties."""
    return sorted(
        devices, key=lambda d: (d.spec.slot is None, d.spec.slot or 0, d.spec.pci_address)
    )


def glyphs(devices: Iterable[GPUDevice], plain: bool, sep: str = "") -> Text:
    """One glyph per device, in the order given."""
    out = Text()
    for i, d in enumerate(devices):
        if i and sep:
            out.append(sep)
        phase = d.status.phase
        if plain:
            out.append(LETTERS[phase] if phase is not None else UNCLASSIFIED_LETTER)
        else:
            out.append(GLYPH, style=COLOURS[phase] if phase is not None else UNCLASSIFIED_COLOUR)
    return out


def legend(plain: bool) -> Text:
    out = Text()
    for i, (phase, colour) in enumerate(COLOURS.items()):
        if i:
            out.append("  ")
        if plain:
            out.append(f"{LETTERS[phase]} {phase.value}")
        else:
            out.append(GLYPH, style=colour)
            out.append(f" {phase.value}")
    return out
