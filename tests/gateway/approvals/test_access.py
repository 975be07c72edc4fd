"""Who may see and answer approvals, and bad answers: each a clear 4xx that leaves the approval as it was."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import assert_error, async_wait_for, pre_tool_use
from tests.gateway.approvals.helpers import (
    ADMIN,
    AGENT_A,
    AGENT_B,
    APPROVER_A,
    APPROVER_A2,
    APPROVER_B,
    answer,
    asking,
    decision_of,
    pending,
    platform_with,
)

pytestmark = pytest.mark.timeout(60)


async def test_only_the_tenants_approvers_answer_and_never_the_token_that_asked(platform: Callable[..., Any]) -> None:
    async with platform_with(platform) as p, asking(p) as held:
        [approval] = await pending(p)
        url = f"{p.url}/v1/approvals/{approval['id']}"
        # Another tenant's approver neither sees nor answers it.
        assert (await p.client.get(f"{p.url}/v1/approvals", headers=APPROVER_B)).json()["approvals"] == []
        assert_error(await p.client.get(url, headers=APPROVER_B), 404, "not_found")
        assert_error(await answer(p, approval["id"], "approve", headers=APPROVER_B), 404, "not_found")
        assert_error(await p.client.get(f"{p.url}/v1/approvals?tenant=acme", headers=APPROVER_B), 403, "forbidden")
        # An agent token reads its own tenant's queue but answers nothing.
        assert_error(await answer(p, approval["id"], "approve", headers=AGENT_B), 403, "forbidden")
        assert (await p.client.get(f"{p.url}/v1/approvals", headers=AGENT_B)).json()["approvals"] == []
        # The token that asked (also an approver token here) cannot approve its own ask.
        body = assert_error(await answer(p, approval["id"], "approve", headers=AGENT_A), 403, "forbidden")
        assert "asked" in body["detail"]
        assert_error(await p.client.get(url), 401)
        # An org admin sees every tenant.
        listed = (await p.client.get(f"{p.url}/v1/approvals", headers=ADMIN)).json()["approvals"]
        assert [a["id"] for a in listed] == [approval["id"]]
        # Nothing of that changed it.
        assert (await p.client.get(url, headers=APPROVER_A)).json()["status"] == "pending"
        assert not held.done()
        assert (await answer(p, approval["id"], "approve", headers=APPROVER_A)).status_code == 200
        assert decision_of(await held)[0] == "allow"


async def test_bad_answers_get_a_clear_4xx_and_change_nothing(platform: Callable[..., Any]) -> None:
    async with platform_with(platform) as p, asking(p) as held:
        [approval] = await pending(p)
        aid = approval["id"]
        assert_error(await answer(p, "0123456789abcdef", "approve"), 404, "not_found")
        assert_error(await answer(p, "not-an-id", "approve"), 404, "not_found")
        assert_error(await answer(p, aid, "approve", scope="ever"), 400, "invalid_field")
        assert_error(await answer(p, aid, "approve", colour="red"), 400, "unknown_field")
        assert_error(await answer(p, aid, "deny", reason=7), 400, "invalid_field")
        raw = await p.client.post(f"{p.url}/v1/approvals/{aid}/approve", content=b"{nope", headers=APPROVER_A)
        assert_error(raw, 400, "invalid_json")
        big = await p.client.post(f"{p.url}/v1/approvals/{aid}/approve", content=b" " * 200_000, headers=APPROVER_A)
        assert_error(big, 413, "payload_too_large")
        assert_error(await answer(p, aid, "approve", input=["not", "an", "object"]), 422, "edit_refused")
        assert_error(await answer(p, aid, "approve", scope="always"), 403, "forbidden")  # org admins only
        body = assert_error(await answer(p, aid, "approve", headers=ADMIN, scope="always"), 409, "needs_policy_push")
        assert "hookbus approvals approve ID --for always" in body["detail"]
        shown = (await p.client.get(f"{p.url}/v1/approvals/{aid}", headers=APPROVER_A)).json()
        assert shown["status"] == "pending" and shown["answer"] is None and shown["approvers"] == []
        assert not held.done()
        assert (await answer(p, aid, "deny", reason="no")).status_code == 200
        assert decision_of(await held)[0] == "deny"
        # Answered: a second answer, either way, is refused and the first stands.
        assert_error(await answer(p, aid, "approve", headers=APPROVER_A2), 409, "already_answered")
        assert_error(await answer(p, aid, "deny", headers=APPROVER_A2), 409, "already_answered")
        assert (await p.client.get(f"{p.url}/v1/approvals/{aid}", headers=APPROVER_A)).json()["status"] == "denied"


async def test_an_answer_after_the_deadline_is_refused(platform: Callable[..., Any]) -> None:
    async with platform_with(platform, timeoutSeconds=0.5, holdSeconds=0.1) as p:
        response = await p.post(
            {
                "hook_event_name": "PreToolUse",
                "session_id": "s-x",
                "tool_name": "Bash",
                "tool_input": {"command": "git push x"},
            },
            headers=AGENT_A,
        )
        _, reason = decision_of(response)
        approval_id = reason.split("hookbus approval ")[1].split(",")[0]

        async def expired() -> bool:
            shown = await p.client.get(f"{p.url}/v1/approvals/{approval_id}", headers=APPROVER_A)
            return bool(shown.json()["status"] == "expired")

        await async_wait_for(expired, timeout_s=10)
        assert_error(await answer(p, approval_id, "approve"), 410, "expired")
        assert_error(await answer(p, approval_id, "deny"), 410, "expired")


async def test_the_two_person_rule_needs_two_different_approvers(platform: Callable[..., Any]) -> None:
    async with platform_with(platform, twoPerson=["git push"]) as p, asking(p) as held:
        [approval] = await pending(p)
        assert approval["approvers_needed"] == 2
        first = await answer(p, approval["id"], "approve", headers=APPROVER_A)
        assert first.status_code == 202 and first.json()["status"] == "pending"
        assert_error(await answer(p, approval["id"], "approve", headers=APPROVER_A), 409, "same_approver")
        assert not held.done()
        assert (await answer(p, approval["id"], "approve", headers=APPROVER_A2)).status_code == 200
        decision, reason = decision_of(await held)
        assert decision == "allow" and reason.count("approver") == 2


@pytest.mark.parametrize(("two_person", "needed"), [(["Bash(git push *)"], 2), (["Bash(npm publish *)"], 1)])
async def test_the_two_person_rule_names_the_permission_rule_that_asked(
    platform: Callable[..., Any], two_person: list[str], needed: int
) -> None:
    async with platform_with(platform, twoPerson=two_person) as p, asking(p):
        [approval] = await pending(p)
        assert approval["approvers_needed"] == needed


async def test_the_trail_shows_the_sessions_own_events_never_another_tenants(platform: Callable[..., Any]) -> None:
    async with platform_with(platform) as p:
        await p.post(pre_tool_use("ls beta-secret-plans", "s-same"), headers=AGENT_B)  # beta, same session id
        await p.post(pre_tool_use("ls acme-notes", "s-same"), headers=AGENT_A)
        await async_wait_for(lambda: _logged(p, 2), timeout_s=10)
        async with asking(p, session="s-same"):
            [approval] = await pending(p)
            shown = json.dumps(approval["trail"])
            assert "acme-notes" in shown and "beta-secret-plans" not in shown


async def _logged(p: Any, count: int) -> bool:
    response = await p.client.get(f"{p.url}/v1/audit/events", headers=ADMIN)
    return len([line for line in response.text.splitlines() if line.strip()]) >= count
