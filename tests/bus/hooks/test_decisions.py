"""Decisions, outcomes and fail-open reasons: one StrEnum each, whose members are their wire values."""

from __future__ import annotations

import json

import orjson
import pytest

from bus.hooks.decisions import Decision, FailOpenReason, RecordOutcome
from bus.runtime import metricvalues
from bus.runtime.metrics import Metrics


@pytest.fixture
def m() -> Metrics:
    """Metrics of this test alone (a registry of its own)."""
    return Metrics()


def test_the_members_are_the_strings_on_the_wire() -> None:
    assert list(Decision) == ["allow", "deny", "ask", "defer", "block", "none"]
    assert list(RecordOutcome) == ["decided", "recorded", "fail-open"]
    assert list(FailOpenReason) == ["timeout", "redis_unavailable", "dispatcher_error", "hook_error", "hook_timeout"]
    assert orjson.dumps({"d": Decision.NONE, "o": RecordOutcome.FAIL_OPEN}) == b'{"d":"none","o":"fail-open"}'
    assert json.dumps([FailOpenReason.TIMEOUT]) == '["timeout"]'
    assert f"{RecordOutcome.FAIL_OPEN}" == "fail-open"


def test_the_metric_label_values_are_the_enums(m: Metrics) -> None:
    assert metricvalues.DECISION_VALUES == ("allow", "deny", "ask", "defer", "block", "none")
    assert metricvalues.FAIL_OPEN_REASONS == tuple(r.value for r in FailOpenReason)
    assert m.child(m.decisions, "Stop", Decision.BLOCK) is m.child(m.decisions, "Stop", "block")


def test_only_the_gateway_answers_for_some_reasons() -> None:
    assert {r for r in FailOpenReason if r.answered_by_gateway} == {"timeout", "redis_unavailable", "dispatcher_error"}
