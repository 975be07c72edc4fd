"""Fixtures of the Redis Cluster tests: one real six-node cluster on 127.0.0.1 per session.

The cluster needs Redis 7 (Debian's ``redis-server`` and ``redis-tools``); without it every
test here is skipped, saying so (failed under CI: :mod:`tests.ci`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ci import missing
from tests.redis_cluster import ClusterUnavailable, LocalCluster


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three masters and three replicas, started once; tests that kill a node bring it back."""
    try:
        cluster = LocalCluster()
    except ClusterUnavailable as exc:
        missing(f"no Redis Cluster: {exc}")
    with cluster:
        yield cluster


@pytest.fixture
def redis_cluster_url(redis_cluster: LocalCluster) -> str:
    """The seed URL of the session's cluster, healthy and emptied for this test."""
    redis_cluster.wait_healthy(timeout_s=20.0)
    redis_cluster.flushall()
    return redis_cluster.seed_url
