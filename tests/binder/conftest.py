"""The `cluster` fixture: an empty embedded cluster with the h100 class and a binder."""

from __future__ import annotations

import pytest

from .cluster import Cluster


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    c.gpu_class()
    return c
