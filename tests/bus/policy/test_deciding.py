"""The pure decision step: the same results always give the same judgement, with its counts as data."""

from __future__ import annotations

from typing import Any

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.deciding import Count, deciders, judge

PRE = "PreToolUse"


def answer(handler_id: str, decision: str | None = None, **fields: Any) -> HandlerResult:
    output = {}
    if decision is not None:
        output = {"hookSpecificOutput": {"hookEventName": PRE, "permissionDecision": decision}}
    return HandlerResult(Outcome.OK, output=output, handler_type="command", handler_id=handler_id, **fields)


def failed(handler_id: str, outcome: Outcome, **fields: Any) -> HandlerResult:
    return HandlerResult(outcome, reason="boom", handler_type="http", handler_id=handler_id, **fields)


def test_the_strictest_answer_wins_and_its_handlers_decided() -> None:
    results = [answer("a", "allow"), answer("b", "deny"), answer("c"), answer("d", "deny")]
    judgement = judge(PRE, results)
    assert judgement.merged.decision == "deny"
    assert (judgement.fail_open, judgement.counts, judgement.shadow) == (None, [], [])
    assert deciders(PRE, judgement.enforced, judgement.merged.decision) == ["b", "d"]


def test_a_failure_that_let_the_call_through_is_a_fail_open_and_a_timeout_is_counted() -> None:
    judgement = judge(PRE, [answer("a", "allow"), failed("b", Outcome.TIMEOUT)])
    assert judgement.merged.decision == "allow"
    assert judgement.fail_open == "hook_timeout"
    assert judgement.counts == [Count("timeouts", ("handler",))]
    # The same failure under a deny let nothing through.
    assert judge(PRE, [answer("a", "deny"), failed("b", Outcome.ERROR)]).fail_open is None
    assert judge(PRE, [failed("b", Outcome.ERROR)]).fail_open == "hook_error"


def test_a_fail_closed_failure_blocks_and_is_counted() -> None:
    judgement = judge(PRE, [failed("b", Outcome.ERROR, fail_closed=True)])
    assert judgement.merged.decision == "deny"
    assert judgement.fail_open is None
    assert judgement.counts == [Count("fail_closed", (PRE, "http"))]


def test_shadow_answers_are_logged_not_enforced() -> None:
    judgement = judge(PRE, [answer("a", "allow"), answer("s", "deny", shadow=True)])
    assert judgement.merged.decision == "allow"
    assert judgement.shadow == [{"decision": "deny", "output": judgement.shadow[0]["output"], "handlers": ["s"]}]
    assert judgement.counts == [Count("shadow_decisions", (PRE, "deny"))]
    whole = judge(PRE, [answer("a", "deny")], whole_shadow=True)
    assert (whole.merged.decision, whole.enforced, whole.shadow[0]["decision"]) == ("none", [], "deny")


def test_judging_the_same_results_twice_gives_the_same_judgement() -> None:
    results = [answer("a", "ask"), failed("b", Outcome.TIMEOUT), answer("s", "deny", shadow=True)]
    assert judge(PRE, results) == judge(PRE, results)


def test_answers_that_say_nothing_decide_nothing() -> None:
    results = [answer("a"), answer("b"), HandlerResult(Outcome.OK, output=None, handler_id="c")]
    judgement = judge(PRE, results)
    assert (judgement.merged.output, judgement.merged.decision, judgement.merged.reason) == ({}, "none", None)
    assert (judgement.enforced, judgement.shadow, judgement.fail_open, judgement.counts) == (results, [], None, [])
    assert judgement.enforced is not results  # the judgement's own list, as for any other results
    assert deciders(PRE, judgement.enforced, judgement.merged.decision) == []
    assert judge(PRE, []).merged.decision == "none"
    # Saying nothing in shadow mode is still logged as what the shadow handlers would decide.
    assert judge(PRE, [answer("s", shadow=True)]).shadow == [{"decision": "none", "output": {}, "handlers": ["s"]}]
    assert judge(PRE, [answer("a")], whole_shadow=True).shadow[0]["handlers"] == ["a"]
