"""Printing as kubectl does: aligned columns under upper-case headers (`-o wide` adds
some), or the same facts as JSON or YAML for scripts; colour only on a terminal."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

import yaml
from rich.console import Console
from rich.text import Text

Format = Literal["table", "wide", "json", "yaml"]
FORMATS: tuple[str, ...] = ("wide", "json", "yaml")
Cell = str | Text
GAP = "   "


def colour_wanted(stream: TextIO) -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@dataclass
class Table:
    headers: Sequence[str]
    rows: list[Sequence[Cell]] = field(default_factory=list)

    def add(self, *cells: Cell) -> None:
        self.rows.append(cells)

    def render(self) -> Text:
        widths = [len(h) for h in self.headers]
        for row in self.rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(_plain(cell)))
        out = Text()
        for row in [[h.upper() for h in self.headers], *self.rows]:
            line = Text()
            for i, cell in enumerate(row):
                last = i == len(row) - 1
                text = cell if isinstance(cell, Text) else Text(cell)
                line.append_text(text)
                if not last:
                    line.append(" " * (widths[i] - len(text.plain)) + GAP)
            out.append_text(line)
            out.rstrip()  # an empty last column leaves no trailing blanks
            out.append("\n")
        return out


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


class Printer:
    """Where the output goes and how: colour or not, a table or structured data."""

    def __init__(self, stream: TextIO | None = None, colour: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.colour = colour_wanted(self.stream) if colour is None else colour
        self._console = Console(
            file=self.stream,
            force_terminal=self.colour,
            no_color=not self.colour,
            highlight=False,
            soft_wrap=True,
            emoji=False,
            markup=False,
        )

    @property
    def plain(self) -> bool:
        return not self.colour

    def text(self, text: Text | str) -> None:
        if isinstance(text, str):
            text = Text(text)
        if self.colour:
            self._console.print(text, end="")
        else:
            self.stream.write(text.plain)

    def line(self, text: Text | str = "") -> None:
        self.text(text)
        self.stream.write("\n")

    def data(self, value: Any, fmt: Format) -> None:
        if fmt == "json":
            self.stream.write(json.dumps(value, indent=2, default=str) + "\n")
        else:
            yaml.safe_dump(value, self.stream, sort_keys=False, default_flow_style=False)


def age(then: datetime | None, now: datetime) -> str:
    """kubectl's AGE: 42s, 5m, 3h, 2d (rounded down)."""
    if then is None:
        return "<unknown>"
    seconds = max(0, int((now - then.astimezone(UTC)).total_seconds()))
    # Two of a unit before it is used, as kubectl does: 90s, then 2m, 119m, then 2h.
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
