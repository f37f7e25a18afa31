"""`kubectl gpu status` on a terminal, as a person sees it: checked once in tmux and kept.

The snapshots were taken by running this module's cluster's `kubectl gpu status` in a
120-column tmux pane (TERM=xterm-256color) and capturing it:

    tmux capture-pane -p     > snapshots/status.terminal.txt    # the characters
    tmux capture-pane -p -e  > snapshots/status.terminal.ansi   # and their colours

Each test renders the same cluster now and compares it cell by cell with what tmux showed:
the characters, and each glyph's colour and weight (tmux re-encodes the escape sequences,
so the screens are compared, not the bytes). To retake them, print
`(await kubectl(cluster, "status", colour=True)).out` for `a_cluster` in such a pane.
"""

from __future__ import annotations

import re
from pathlib import Path

from binder.cluster import Cluster

from .conftest import kubectl
from .test_status import a_cluster

SNAPSHOTS = Path(__file__).parent / "snapshots"
SGR = re.compile(r"\x1b\[([0-9;]*)m")
Cell = tuple[str, str, bool]  # character, foreground colour, bold


def screen(text: str) -> list[list[Cell]]:
    """What a terminal shows: each character with the colour and weight it is drawn in."""
    fg, bold = "default", False
    lines: list[list[Cell]] = [[]]
    pos = 0
    for m in [*SGR.finditer(text), None]:
        end = m.start() if m is not None else len(text)
        for ch in text[pos:end]:
            if ch == "\n":
                lines.append([])
            else:
                lines[-1].append((ch, fg, bold))
        if m is None:
            break
        pos = m.end()
        for code in (int(c) if c else 0 for c in m.group(1).split(";")):
            if code == 0:
                fg, bold = "default", False
            elif code == 1:
                bold = True
            elif code == 22:
                bold = False
            elif 30 <= code <= 37 or 90 <= code <= 97:
                fg = str(code)
            elif code == 39:
                fg = "default"
    # Blanks at a line's end and empty lines at the end show nothing.
    trimmed = [
        line[: max((i + 1 for i, c in enumerate(line) if c[0] != " "), default=0)] for line in lines
    ]
    while trimmed and not trimmed[-1]:
        trimmed.pop()
    return trimmed


async def test_the_terminal_shows_what_tmux_showed(cluster: Cluster) -> None:
    await a_cluster(cluster)
    ran = await kubectl(cluster, "status", colour=True)
    shown = screen((SNAPSHOTS / "status.terminal.ansi").read_text())
    assert screen(ran.out) == shown


async def test_each_slot_is_drawn_in_its_phases_colour(cluster: Cluster) -> None:
    await a_cluster(cluster)
    ran = await kubectl(cluster, "status", colour=True)
    rows = {"".join(c[0] for c in line).split()[0]: line for line in screen(ran.out) if line}
    glyphs = [(fg, bold) for ch, fg, bold in rows["node-a"] if ch == "■"]
    # Bound yellow, Available green, Attached bold magenta (twice).
    assert glyphs == [("33", False), ("32", False), ("35", True), ("35", True)]
    glyphs = [(fg, bold) for ch, fg, bold in rows["node-b"] if ch == "■"]
    assert glyphs == [("32", False)] * 3 + [("31", True)]  # three Available, one Lost


async def test_the_characters_are_those_of_the_snapshot(cluster: Cluster) -> None:
    await a_cluster(cluster)
    ran = await kubectl(cluster, "status", colour=True)
    plain = "\n".join("".join(c[0] for c in line) for line in screen(ran.out))
    assert plain + "\n" == (SNAPSHOTS / "status.terminal.txt").read_text()
