"""The edge models, and that the gateway's fast input check agrees with HookInput."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bus.errors import RequestRejected
from bus.hooks.models import HookInput, HookOutput
from gateway.hooks import HooksEndpoint

VALID: list[dict[str, Any]] = [
    {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}},
    {"hook_event_name": "Stop", "session_id": "abc", "stop_hook_active": True, "brand_new_field": [1, 2]},
    {"hook_event_name": "SomeFutureEvent", "session_id": "x"},
]
INVALID: list[Any] = [
    {"session_id": "s"},
    {"hook_event_name": "Stop"},
    {"hook_event_name": "", "session_id": "s"},
    {"hook_event_name": "Stop", "session_id": 5},
    {"hook_event_name": ["Stop"], "session_id": "s"},
    {"hook_event_name": "Stop", "session_id": None},
]


@pytest.mark.parametrize("data", VALID)
def test_valid_inputs_are_accepted_by_both(data: dict[str, Any]) -> None:
    model = HookInput.model_validate(data)
    assert model.to_wire() == data
    assert HooksEndpoint.parse(__import__("orjson").dumps(data)) == data


@pytest.mark.parametrize("data", INVALID)
def test_invalid_inputs_are_refused_by_both(data: Any) -> None:
    with pytest.raises(ValidationError):
        HookInput.model_validate(data)
    with pytest.raises(RequestRejected) as info:
        HooksEndpoint.parse(__import__("orjson").dumps(data))
    assert info.value.status == 400


def test_unknown_fields_are_kept() -> None:
    model = HookInput.model_validate(VALID[1])
    assert model.extra_fields == {"brand_new_field": [1, 2]}


def test_output_round_trips_with_wire_names() -> None:
    wire = {
        "continue": False,
        "stopReason": "done",
        "systemMessage": "hi",
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no",
            "updatedInput": {"command": "ls"},
        },
    }
    output = HookOutput.model_validate(wire)
    assert output.continue_ is False and output.blocked
    assert output.to_wire() == wire


@pytest.mark.parametrize(
    ("wire", "blocked"),
    [
        ({}, False),
        ({"decision": "block", "reason": "r"}, True),
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}, False),
    ],
)
def test_blocked(wire: dict[str, Any], blocked: bool) -> None:
    assert HookOutput.model_validate(wire).blocked is blocked
