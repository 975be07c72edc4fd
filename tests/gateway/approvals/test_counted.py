"""An approval asked on a session counter: the third ``git push`` of the hour waits for a person."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Platform, policy_yaml, pre_tool_use
from tests.gateway.approvals.helpers import AGENT_A, APPROVER_A, TOKENS, answer, asking, decision_of, pending

pytestmark = pytest.mark.timeout(60)

PUSH = "git push origin main"


def counted_policy() -> str:
    """Pushes are allowed; from a session's third push of the hour, a person approves each."""
    counters = {"pushes": {"count": [{"event": "PreToolUse", "rules": ["Bash(git push *)"]}], "window": "1h"}}
    allowed = {"matcher": "Bash", "hooks": [{"type": "rule", "allow": ["Bash(git push *)"]}]}
    counted = {
        "matcher": "Bash",
        "approval": True,
        "when": {"counters": {"pushes": {"gte": 2}}},
        "hooks": [{"type": "rule", "ask": ["Bash(git push *)"], "reason": "the third push of the hour"}],
    }
    approvals = {"enabled": True, "timeoutSeconds": 30, "holdSeconds": 8}
    return policy_yaml({"PreToolUse": [allowed, counted]}, approvals=approvals, session={"counters": counters})


async def _push_at_once(p: Platform, session: str) -> str:
    response = await p.post(pre_tool_use(PUSH, session), headers=AGENT_A, timeout=10)
    assert response.status_code == 200, response.text
    return decision_of(response)[0]


async def _no_pending(p: Platform) -> bool:
    response = await p.client.get(f"{p.url}/v1/approvals", headers=APPROVER_A)
    found: list[Any] = response.json()["approvals"]
    return not found


async def test_the_third_push_of_a_session_waits_for_a_person(platform: Callable[..., Any]) -> None:
    async with platform(counted_policy(), **TOKENS) as p:
        assert await _push_at_once(p, "s-1") == "allow"
        assert await _push_at_once(p, "s-1") == "allow"
        assert await _no_pending(p)
        async with asking(p, PUSH, "s-1") as held:
            [approval] = await pending(p)
            assert approval["tool_input"] == {"command": PUSH}
            assert "third push" in approval["reason"]
            assert not held.done()
            # Another session has pushed nothing yet: it is not asked, even while s-1 waits.
            assert await _push_at_once(p, "s-2") == "allow"
            assert len(await pending(p)) == 1
            assert (await answer(p, approval["id"], "approve")).status_code == 200
            decision, reason = decision_of(await held)
            assert decision == "allow" and approval["id"] in reason
        assert await _no_pending(p)
