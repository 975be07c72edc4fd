"""The approval queue end to end: an ``ask`` held for a person and answered through ``/v1/approvals``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import BusProbe, async_wait_for, logged, pre_tool_use
from tests.gateway.approvals.helpers import (
    AGENT_A,
    APPROVER_A,
    answer,
    asking,
    decision_of,
    pending,
    platform_with,
)

pytestmark = pytest.mark.timeout(60)


async def test_an_ask_waits_for_a_person_and_runs_once_approved(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform_with(platform) as p, asking(p) as held:
        [approval] = await pending(p)
        assert approval["tool_input"] == {"command": "git push origin main"}
        assert approval["tenant"] == "acme" and approval["status"] == "pending"
        assert "git push" in approval["reason"]
        assert not held.done()
        response = await answer(p, approval["id"], "approve", headers={**APPROVER_A, "X-Hookbus-Approver": "alice"})
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "approved"
        reply = await held
        decision, reason = decision_of(reply)
        assert decision == "allow" and "alice" in reason and approval["id"] in reason
        records = await async_wait_for(lambda: _records(bus, reply.headers["X-Hookbus-Event-Id"], 2), timeout_s=5)
        first, last = records
        assert first.decision == "ask" and last.decision == "allow"
        note = last.approval
        assert note["id"] == approval["id"] and note["outcome"] == "approved" and note["for"] == "once"
        assert "alice" in note["by"][0] and note["wait_ms"] >= 0
        assert p.metrics.value("hookbus_approvals_total", outcome="approved") == 1
        # Once: the same call in the same session asks again.
        async with asking(p) as again:
            [second] = await pending(p)
            assert second["id"] != approval["id"]
            assert (await answer(p, second["id"], "deny", reason="not today")).status_code == 200
            assert decision_of(await again)[0] == "deny"


async def _records(bus: BusProbe, event_id: str, count: int) -> list[Any] | None:
    found = [r for r in await bus.log() if r.event_id == event_id]
    return found if len(found) >= count else None


async def test_a_deny_carries_the_approvers_reason_to_the_model(platform: Callable[..., Any]) -> None:
    async with platform_with(platform) as p, asking(p) as held:
        [approval] = await pending(p)
        response = await answer(p, approval["id"], "deny", reason="pushes to main wait for the release")
        assert response.status_code == 200
        decision, reason = decision_of(await held)
        assert decision == "deny" and "pushes to main wait for the release" in reason
        assert p.metrics.value("hookbus_approvals_total", outcome="denied") == 1


async def test_nobody_answering_is_a_deny_never_an_allow(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform_with(platform, timeoutSeconds=1) as p, asking(p) as held:
        decision, reason = decision_of(await held)
        assert decision == "deny" and "expired" in reason
        assert p.metrics.value("hookbus_approvals_total", outcome="expired") == 1
        assert (await p.client.get(f"{p.url}/v1/approvals", headers=APPROVER_A)).json()["approvals"] == []
        records = await _records(bus, held.result().headers["X-Hookbus-Event-Id"], 2)
        assert records is not None and records[-1].approval["outcome"] == "expired"


async def test_approved_for_the_session_the_same_rule_is_not_asked_again(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform_with(platform) as p:
        async with asking(p, "git push origin main", "s-7") as held:
            [approval] = await pending(p)
            assert (await answer(p, approval["id"], "approve", scope="session")).status_code == 200
            assert decision_of(await held)[0] == "allow"
        # Same rule, same session, another push: allowed at once, no approval opened.
        response = await p.post(pre_tool_use("git push origin dev", "s-7"), headers=AGENT_A)
        decision, reason = decision_of(response)
        assert decision == "allow" and "session" in reason
        assert p.metrics.value("hookbus_approvals_total", outcome="session") == 1
        # Its record says so, naming no approval (none was stored for this call).
        event_id = response.headers["X-Hookbus-Event-Id"]
        records = await async_wait_for(lambda: _records(bus, event_id, 2), timeout_s=5)
        assert records[-1].approval["outcome"] == "session" and records[-1].approval["id"] is None
        assert approval["id"] not in reason
        # Another session asks.
        async with asking(p, "git push origin dev", "s-8"):
            [other] = await pending(p)
            assert other["session_id"] == "s-8"


async def test_an_edited_input_is_sent_as_updated_input_and_checked_again(platform: Callable[..., Any]) -> None:
    async with platform_with(platform) as p, asking(p) as held:
        [approval] = await pending(p)
        smuggled = await answer(p, approval["id"], "approve", input={"command": "rm -rf /"})
        assert smuggled.status_code == 422 and smuggled.json()["error"] == "edit_refused"
        huge = await answer(p, approval["id"], "approve", input={"command": "x" * 70_000})
        assert huge.status_code == 413
        assert not held.done()
        edited = {"command": "git push origin main --dry-run"}
        assert (await answer(p, approval["id"], "approve", input=edited)).status_code == 200
        specific = (await held).json()["hookSpecificOutput"]
        assert specific["permissionDecision"] == "allow" and specific["updatedInput"] == edited


async def test_a_retry_of_the_same_call_finds_its_approval_and_its_answer(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform_with(platform, holdSeconds=0.3) as p:
        first = await p.post(pre_tool_use("git push origin main", "s-r"), headers=AGENT_A, timeout=30)
        decision, reason = decision_of(first)
        assert decision == "deny" and "try the same call again later" in reason  # still pending: never an allow
        [approval] = await pending(p)
        assert approval["id"] in reason
        retry = await p.post(pre_tool_use("git push origin main", "s-r"), headers=AGENT_A, timeout=30)
        assert decision_of(retry)[0] == "deny"
        assert [a["id"] for a in await pending(p)] == [approval["id"]]  # the same approval
        assert (await answer(p, approval["id"], "approve")).status_code == 200
        after = await p.post(pre_tool_use("git push origin main", "s-r"), headers=AGENT_A, timeout=30)
        assert decision_of(after)[0] == "allow"
        record = await async_wait_for(lambda: _records(bus, after.headers["X-Hookbus-Event-Id"], 2), timeout_s=5)
        assert record[-1].approval["answered_event"] == approval["event_id"]


async def test_a_headless_claude_code_run_is_deferred_and_resumed_with_the_answer(platform: Callable[..., Any]) -> None:
    async with platform_with(platform) as p:
        headers = {**AGENT_A, "X-Hookbus-Headless": "1"}
        first = await p.post(pre_tool_use("git push origin main", "s-d"), headers=headers, timeout=30)
        assert decision_of(first)[0] == "defer"
        [approval] = await pending(p)
        assert (await answer(p, approval["id"], "approve")).status_code == 200
        resumed = await p.post(pre_tool_use("git push origin main", "s-d"), headers=headers, timeout=30)
        assert decision_of(resumed)[0] == "allow"


async def test_past_the_bound_a_new_ask_gets_the_timeouts_verdict_at_once(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform_with(platform, maxPending=1) as p, asking(p, "git push origin a", "s-1"):
        await pending(p)
        flood = await p.post(pre_tool_use("git push origin b", "s-2"), headers=AGENT_A, timeout=30)
        decision, reason = decision_of(flood)
        assert decision == "deny" and "maxPending" in reason
        assert p.metrics.value("hookbus_approvals_total", outcome="overflow") == 1
        assert len(await pending(p)) == 1
        record = await async_wait_for(lambda: _records(bus, flood.headers["X-Hookbus-Event-Id"], 2), timeout_s=5)
        assert record[-1].approval["outcome"] == "overflow" and record[-1].approval["id"] is None
        assert (await logged(bus, flood)).event_id == flood.headers["X-Hookbus-Event-Id"]


async def test_an_agent_that_goes_away_is_no_longer_held_and_its_approval_waits(platform: Callable[..., Any]) -> None:
    async with platform_with(platform, holdSeconds=60) as p:
        desk = p.app.gateway.approvals
        async with asking(p, session="s-gone") as held:
            [approval] = await pending(p)
            assert desk._held
        assert held.cancelled()  # the agent closed its connection
        await async_wait_for(lambda: not desk._held, timeout_s=5)  # long before holdSeconds
        [still] = await pending(p)
        assert still["id"] == approval["id"] and still["status"] == "pending"


async def test_a_call_approved_always_is_allowed_at_once_and_its_record_names_the_rule(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform_with(platform, approved=["Bash(git push origin main)"]) as p:
        response = await p.post(pre_tool_use("git push origin main", "s-al"), headers=AGENT_A, timeout=30)
        decision, reason = decision_of(response)
        assert decision == "allow" and "Bash(git push origin main)" in reason
        assert p.metrics.value("hookbus_approvals_total", outcome="always") == 1
        event_id = response.headers["X-Hookbus-Event-Id"]
        records = await async_wait_for(lambda: _records(bus, event_id, 2), timeout_s=5)
        note = records[-1].approval
        assert note["outcome"] == "always" and note["id"] is None and note["rule"] == "Bash(git push origin main)"
        # Another push is not covered: it waits for a person.
        async with asking(p, "git push origin dev", "s-al"):
            [approval] = await pending(p)
            assert approval["tool_input"] == {"command": "git push origin dev"}
