"""Async hooks' pending context (:mod:`bus.stream.pending_context`): which events take it, how it is read and merged."""

from __future__ import annotations

from typing import Any

import pytest

from bus.policy.loading import policy_from_text
from bus.stream.pending_context import parse_items, takes_context, with_context
from tests.conftest import policy_yaml

ASYNC = {"PostToolUse": [{"hooks": [{"type": "command", "command": "true", "async": True}]}]}


def test_only_events_that_carry_additional_context_take_it_and_only_under_async_handlers() -> None:
    with_async = policy_from_text(policy_yaml(ASYNC))
    without = policy_from_text(policy_yaml({"PreToolUse": [{"hooks": [{"type": "rule", "deny": ["Bash(rm *)"]}]}]}))
    assert takes_context(with_async, "PreToolUse") and takes_context(with_async, "UserPromptSubmit")
    assert not takes_context(with_async, "Notification")  # its output has no additionalContext
    assert not takes_context(without, "PreToolUse")  # nothing can have left any


def test_items_come_from_a_popped_list_or_from_the_entrys_json_array() -> None:
    items = [b'{"additionalContext":"a"}', b'{"systemMessage":"b"}']
    assert (
        parse_items(items)
        == parse_items(b"[" + b",".join(items) + b"]")
        == [{"additionalContext": "a"}, {"systemMessage": "b"}]
    )
    assert parse_items(b"[]") == []


@pytest.mark.parametrize("raw", [b'{"additionalContext":"a"}', b'["text"]', b"[not json", [b"1"]])
def test_anything_but_json_objects_is_refused(raw: bytes | list[bytes]) -> None:
    with pytest.raises(ValueError):
        parse_items(raw)


def test_context_and_messages_follow_the_events_own() -> None:
    own: dict[str, Any] = {
        "systemMessage": "own",
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "additionalContext": "mine",
        },
    }
    merged = with_context(
        own,
        "PreToolUse",
        [{"additionalContext": "later", "systemMessage": "note"}, {"additionalContext": None, "systemMessage": ""}],
    )
    assert merged == {
        "systemMessage": "own\nnote",
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "additionalContext": "mine\n\nlater",
        },
    }
    assert own["hookSpecificOutput"]["additionalContext"] == "mine"  # not changed in place
    assert with_context({}, "UserPromptSubmit", [{"systemMessage": ""}]) == {}
    assert with_context({}, "UserPromptSubmit", [{"additionalContext": "x"}]) == {
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "x"}
    }
