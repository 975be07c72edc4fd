"""The approval queue on a real Redis Cluster: an ask held, listed, answered and answered again
from its session grant, as on one Redis (the store's scripts keep each tenant's keys in one slot)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bus.redis.urls import cluster_url
from tests.conftest import pre_tool_use
from tests.gateway.approvals.helpers import (
    AGENT_A,
    APPROVER_A,
    TOKENS,
    answer,
    approvals_policy,
    asking,
    decision_of,
    pending,
)
from tests.redis_cluster import LocalCluster


@pytest.mark.timeout(90)
async def test_an_approval_round_trip_on_a_cluster(
    platform: Callable[..., Any], redis_cluster: LocalCluster, redis_cluster_url: str, redis_url: str
) -> None:
    url = cluster_url(redis_cluster_url)
    async with platform(approvals_policy(), on_redis=url, queue_redis_url=redis_url, **TOKENS) as p:
        async with asking(p, "git push origin main", "s-cluster") as held:
            [approval] = await pending(p)
            assert approval["status"] == "pending" and approval["tool_input"] == {"command": "git push origin main"}
            assert (await answer(p, approval["id"], "approve", scope="session")).status_code == 200
            decision, reason = decision_of(await held)
            assert decision == "allow" and approval["id"] in reason
        # The session grant answers the same rule at once; the queue is empty again.
        again = await p.post(pre_tool_use("git push origin dev", "s-cluster"), headers=AGENT_A, timeout=30)
        assert decision_of(again)[0] == "allow"
        assert p.metrics.value("hookbus_approvals_total", outcome="session") == 1
        listed = await p.client.get(f"{p.url}/v1/approvals", headers=APPROVER_A)
        assert listed.json()["approvals"] == []
