"""An approval shows the session's facts (session policy) next to its last events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import pre_tool_use
from tests.gateway.approvals.helpers import AGENT_A, APPROVER_A, TOKENS, approvals_policy_with_a_fact, asking, pending

pytestmark = pytest.mark.timeout(60)


async def test_an_approval_lists_the_facts_of_its_session(platform: Callable[..., Any]) -> None:
    async with platform(approvals_policy_with_a_fact(), **TOKENS) as p:
        read = pre_tool_use("", "s-facts", tool="Read") | {"tool_input": {"file_path": "/tmp/app/.env"}}
        assert (await p.post(read, headers=AGENT_A)).status_code == 200
        async with asking(p, session="s-facts"):
            [approval] = await pending(p)
            assert approval["facts"] == ["private_data"]
            assert approval["trail"][0]["tool"] == "Read"
            shown = await p.client.get(f"{p.url}/v1/approvals/{approval['id']}", headers=APPROVER_A)
            assert shown.status_code == 200 and shown.json()["facts"] == ["private_data"]
        async with asking(p, session="s-other"):
            found = await pending(p, count=2)
            [other] = [a for a in found if a["session_id"] == "s-other"]
            assert other["facts"] == []
