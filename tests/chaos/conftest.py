"""Chaos runs: short ones always, long ones with --slow."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="a long chaos run: enable with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
