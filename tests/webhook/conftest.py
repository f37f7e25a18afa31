"""The cluster every webhook test starts from (see webhook_cluster)."""

from __future__ import annotations

import pytest

from .webhook_cluster import Cluster


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()
