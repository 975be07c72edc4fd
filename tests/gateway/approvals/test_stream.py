"""How an approval ended reaches the live stream of its tenant only (``GET /v1/events/stream``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import async_wait_for, pre_tool_use
from tests.gateway.approvals.helpers import AGENT_B, answer, asking, decision_of, pending, platform_with
from tests.gateway.decisionlog.test_sse import watching

pytestmark = pytest.mark.timeout(60)


async def test_the_answer_record_streams_to_the_tenant_and_never_to_another(platform: Callable[..., Any]) -> None:
    async with (
        platform_with(platform) as p,
        watching(p.url, "approver-a") as acme,
        watching(p.url, "approver-b") as beta,
        watching(p.url, "admin-1") as admin,
    ):
        async with asking(p) as held:
            [approval] = await pending(p)
            assert (await answer(p, approval["id"], "deny", reason="not now")).status_code == 200
            assert decision_of(await held)[0] == "deny"

        def answered(watcher: Any) -> list[dict[str, Any]]:
            return [d for d in watcher.decisions() if d.get("approval")]

        await async_wait_for(lambda: answered(acme) and answered(admin), 10)
        [record] = answered(acme)
        assert record["approval"]["outcome"] == "denied" and record["approval"]["reason"] == "not now"
        assert record["decision"] == "deny" and record["id"] == approval["event_id"]
        # beta's own event arrives on beta's stream after the acme records were written: none of them did.
        await p.post(pre_tool_use("ls", "b-1"), headers=AGENT_B)
        await async_wait_for(lambda: beta.sessions() == ["b-1"], 10)
        assert answered(beta) == [] and {d["tenant"] for d in beta.decisions()} == {"beta"}
