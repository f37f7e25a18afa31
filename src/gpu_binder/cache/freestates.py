"""Nodes grouped by what they have free of a class: GPUs, CPU and memory.

A policy's score depends on a node's free state only, and at scale many nodes share one
(every empty node of a shape, for a start): placement scores each state once and takes
its first node by name, instead of scoring every node. The groups follow the device and
resource indexes as they change, so a placement costs the number of states, not nodes.
"""

from __future__ import annotations

from bisect import bisect_left, insort

# (free GPUs of the class, free CPU millicores, free memory bytes) on a node.
State = tuple[int, int, int]


class FreeStates:
    """Per class: free state -> the nodes in it, by name."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[State, list[str]]] = {}
        self._state: dict[tuple[str, str], State] = {}

    def state(self, class_name: str, node: str) -> State | None:
        return self._state.get((class_name, node))

    def set(self, class_name: str, node: str, state: State | None) -> None:
        """Node now has this state for the class (None: nothing of it free)."""
        key = (class_name, node)
        old = self._state.get(key)
        if old == state:
            return
        groups = self.groups.setdefault(class_name, {})
        if old is not None:
            members = groups[old]
            del members[bisect_left(members, node)]
            if not members:
                del groups[old]
        if state is None:
            del self._state[key]
            return
        self._state[key] = state
        group = groups.get(state)
        if group is None:
            groups[state] = [node]
        else:
            insort(group, node)
