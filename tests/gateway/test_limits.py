"""What a request over a limit gets (:mod:`gateway.limits`): a blocking event is answered ``200``
in the agent's format (no opinion, or a deny under ``hookbus.whenLimited: closed``), never a
status the agent runs past; a non-blocking one ``429``. One session's flood leaves its
teammates their own budgets, so their denies hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import yaml

from bus.dialects import dialect_for
from bus.runtime.settings import Tokens
from gateway.limits import Limited, LimitedOutcome, LimitKind, Scope, limited_answer
from tests.conftest import DENY_RM, BusProbe, pre_tool_use

TOKENS = Tokens.parse("acme:tok-a,beta:tok-b")
ACME = {"Authorization": "Bearer tok-a"}
CLOSED = DENY_RM.replace("hookbus: {deadlineSeconds: 2.0}", "hookbus: {deadlineSeconds: 2.0, whenLimited: closed}")
RATE = Limited(LimitKind.RATE, Scope.SESSION, 0.2, "the session is over its rate limit")


async def until_limited(p: Any, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    """The answer to ``body`` once it is limited: a rate check Redis does not answer within 50 ms
    lets its request be decided instead, which a loaded test machine may see."""
    for _ in range(20):
        response: httpx.Response = await p.post(body, **kwargs)
        if "X-Hookbus-Limited" in response.headers or response.status_code == 429:
            return response
    raise AssertionError("never limited")


def limited_count(p: Any, kind: str, scope: str, outcome: str) -> float:
    value = p.metrics.registry.get_sample_value(
        "hookbus_limited_total", {"limit": kind, "scope": scope, "outcome": outcome}
    )
    return value or 0.0


def test_closed_denies_in_the_events_own_terms_and_open_says_nothing() -> None:
    answer, outcome = limited_answer("PreToolUse", RATE, "closed")
    specific = answer.output["hookSpecificOutput"]
    assert (outcome, answer.decision, specific["permissionDecision"]) == (LimitedOutcome.CLOSED, "deny", "deny")
    assert "hookbus.whenLimited: closed" in specific["permissionDecisionReason"]
    assert "rate limit" in specific["permissionDecisionReason"]
    prompt, _ = limited_answer("UserPromptSubmit", RATE, "closed")
    assert prompt.output["decision"] == "block"
    permission, _ = limited_answer("PermissionRequest", RATE, "closed")
    assert permission.output["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    # Blocking a stop would keep the agent working: a limit never does.
    for event in ("Stop", "SubagentStop"):
        assert limited_answer(event, RATE, "closed")[0].output == {}
    opened, outcome = limited_answer("PreToolUse", RATE, "open")
    assert (opened.output, opened.decision, outcome) == ({}, "none", LimitedOutcome.OPEN)
    assert RATE.headers(LimitedOutcome.OPEN) == {
        "X-Hookbus-Outcome": "fail-open",  # what the shim and the SDK fail open on (closed when told to)
        "X-Hookbus-Limited": "session rate",
        "Retry-After": "1",
    }
    assert RATE.headers(LimitedOutcome.CLOSED)["X-Hookbus-Outcome"] == "fail-closed"


async def test_one_sessions_flood_leaves_its_teammates_denies_standing(platform: Callable[..., Any]) -> None:
    # The tenant's bucket holds 8; each session's a quarter of it (2), at a rate that does not refill here.
    async with platform(DENY_RM, tokens=TOKENS, rate_limit_per_s=0.01, rate_limit_burst=8) as p:
        flood = await asyncio.gather(*(p.post(pre_tool_use("ls", "noisy"), headers=ACME) for _ in range(40)))
        assert {r.status_code for r in flood} == {200}  # never a status the agent runs past
        # (A check Redis does not answer within 50 ms lets its request be decided: under load, fewer than 38.)
        limited = [r for r in flood if "X-Hookbus-Limited" in r.headers]
        assert limited and {r.headers["X-Hookbus-Limited"] for r in limited} == {"session rate"}
        assert {r.headers["X-Hookbus-Outcome"] for r in limited} == {"fail-open"}
        assert {r.content for r in limited} == {b"{}"}  # whenLimited: open (the default) is no opinion
        for teammate in ("mate-1", "mate-2", "mate-3"):
            denied = await p.post(pre_tool_use("rm -rf /", teammate), headers=ACME)
            assert denied.status_code == 200
            assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert limited_count(p, "rate", "session", "open") == len(limited)


async def test_a_limited_blocking_event_under_closed_is_a_200_deny_in_the_agents_format(
    platform: Callable[..., Any],
) -> None:
    async with platform(CLOSED, rate_limit_per_s=0.01, rate_limit_burst=1, session_rate_limit_per_s=0) as p:
        assert (await p.post(pre_tool_use("ls", "a"))).json() == {}  # the tenant's only token
        denied = await until_limited(p, pre_tool_use("ls", "b"))
        assert denied.status_code == 200
        outcome = (denied.headers["X-Hookbus-Outcome"], denied.headers["X-Hookbus-Limited"])
        assert outcome == ("fail-closed", "tenant rate")
        specific = denied.json()["hookSpecificOutput"]
        assert specific["permissionDecision"] == "deny"
        assert "HOOKBUS_RATE_LIMIT" in specific["permissionDecisionReason"]
        gemini: dict[str, Any] = {"hook_event_name": "BeforeTool", "session_id": "g", "tool_name": "run_shell_command"}
        gemini["tool_input"] = {"command": "ls"}
        answer = await until_limited(p, gemini, params={"dialect": "gemini"})
        assert answer.status_code == 200
        assert answer.json() == dialect_for("gemini").to_agent("PreToolUse", denied.json(), gemini)
        assert answer.json()["decision"] == "deny"
        # An event the agent does not wait on keeps its 429: there is no decision to lose.
        note = await until_limited(p, {"hook_event_name": "Notification", "session_id": "n"})
        assert note.status_code == 429 and note.json()["error"] == "rate_limited"
        assert int(note.headers["Retry-After"]) >= 1
        assert limited_count(p, "rate", "tenant", "closed") == 2
        assert limited_count(p, "rate", "tenant", "refused") == 1


async def test_a_policy_layer_chooses_what_limited_events_get(platform: Callable[..., Any]) -> None:
    policy = yaml.safe_load(CLOSED)
    policy["hookbus"]["whenLimited"] = "open"
    async with platform(yaml.safe_dump(policy), rate_limit_per_s=0.01, rate_limit_burst=1) as p:
        await p.post(pre_tool_use("ls", "a"))
        opened = await until_limited(p, pre_tool_use("rm -rf /", "a"))
        assert (opened.status_code, opened.json(), opened.headers["X-Hookbus-Outcome"]) == (200, {}, "fail-open")


async def test_a_flood_of_inputs_it_cannot_judge_is_denied_and_fills_no_log(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(DENY_RM, rate_limit_per_s=0.01, rate_limit_burst=2) as p:
        answers = [await p.post(b"not json") for _ in range(12)]
        assert all(a.status_code == 200 and a.json()["decision"] == "block" for a in answers)  # denied, every one
        limited = [a for a in answers if "X-Hookbus-Limited" in a.headers]
        assert limited and {a.headers["X-Hookbus-Limited"] for a in limited} == {"tenant rate"}
        recorded = {r.event_id for r in await bus.log()}
        assert all(a.headers["X-Hookbus-Event-Id"] not in recorded for a in limited)
        assert all(a.headers["X-Hookbus-Event-Id"] in recorded for a in answers if a not in limited)
        assert limited_count(p, "rate", "tenant", "closed") == len(limited)


async def test_each_static_token_of_a_tenant_has_its_own_budget(platform: Callable[..., Any]) -> None:
    tokens = Tokens.parse("acme:tok-a,acme:tok-a2")
    async with platform(DENY_RM, tokens=tokens, token_rate_limit_per_s=0.01, token_rate_limit_burst=1) as p:
        await p.post(pre_tool_use("ls", "a"), headers=ACME)
        spent = await until_limited(p, pre_tool_use("ls", "b"), headers=ACME)
        assert spent.headers["X-Hookbus-Limited"] == "token rate"
        other = await p.post(pre_tool_use("rm -rf /", "c"), headers={"Authorization": "Bearer tok-a2"})
        assert other.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert "X-Hookbus-Limited" not in other.headers
