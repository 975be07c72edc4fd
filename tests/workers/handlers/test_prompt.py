"""``prompt`` hooks against a real Messages-API-shaped server on 127.0.0.1.

The server is :func:`tests.workers.outbound.llm_server.serve_llm` (``test_agent`` uses it too). Nothing
leaves 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.hooks.merge import merge_results
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import policy_from_text
from tests.workers.outbound.llm_server import (
    HANG,
    KEY_ENV,
    REASON,
    SECRET,
    FakeLlm,
    Scripted,
    answer,
    context,
    event_input,
    llm_policy,
    text,
)
from workers.handlers.prompt import DEFAULT_REASON, render_prompt, run
from workers.outbound.llm import LlmClient
from workers.services import Services

pytestmark = pytest.mark.usefixtures("llm_api_key")

Prompt = Callable[..., Any]


@pytest.fixture
def prompt(llm: FakeLlm, services: Services) -> Prompt:
    """``await prompt(event, reply, **handler_fields)``: run one prompt handler; the HandlerResult."""

    async def call(
        event: str, *replies: Scripted, hook_input: dict[str, Any] | None = None, **fields: Any
    ) -> HandlerResult:
        llm.reply(*replies)
        handler = {"type": "prompt", "prompt": "Check this: $ARGUMENTS", **fields}
        return await run(context(llm_policy(llm.url, event, handler), event, services, hook_input))

    return call


# ---- the request --------------------------------------------------------------------------


async def test_request_is_messages_api_with_key_model_and_substituted_input(llm: FakeLlm, prompt: Prompt) -> None:
    hook_input = event_input("PreToolUse")
    result = await prompt(
        "PreToolUse", answer(ok=True), hook_input=hook_input, prompt="Costs \\$5. Judge $ARGUMENTS carefully"
    )
    assert result.outcome is Outcome.OK and result.output == {}
    (seen,) = llm.seen
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == SECRET
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body["model"] == "default-test-model"
    assert isinstance(seen.body["max_tokens"], int) and seen.body["max_tokens"] > 0
    assert '"ok"' in seen.body["system"] and "tools" not in seen.body
    assert seen.prompt == f"Costs $5. Judge {orjson.dumps(hook_input).decode()} carefully"
    assert seen.body["messages"] == [{"role": "user", "content": seen.prompt}]


async def test_input_appended_without_arguments_and_handler_model_wins(llm: FakeLlm, prompt: Prompt) -> None:
    hook_input = event_input("Stop", last_assistant_message="done")
    await prompt("Stop", answer(ok=True), hook_input=hook_input, prompt="Is the work done?", model="claude-special")
    (seen,) = llm.seen
    assert seen.prompt == "Is the work done?\n\n" + orjson.dumps(hook_input).decode()
    assert seen.body["model"] == "claude-special"
    assert "impossible" in seen.body["system"]  # only offered on Stop/SubagentStop


def test_render_prompt_escapes() -> None:
    assert render_prompt("a \\$ARGUMENTS b", "{}") == "a $ARGUMENTS b\n\n{}"
    assert render_prompt("$ARGUMENTS and $ARGUMENTS", "{}") == "{} and {}"
    assert render_prompt("cost $HOME", "{}") == "cost $HOME\n\n{}"


# ---- the effect of each verdict, per event -------------------------------------------------

BLOCK = {"decision": "block", "reason": REASON}
STOP = {"continue": False, "stopReason": REASON}
DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": REASON,
    }
}

TABLE = [
    ("Stop", False, {}, BLOCK, "block"),
    ("Stop", False, {"impossible": True}, {"systemMessage": f"The stop condition cannot be met: {REASON}"}, "none"),
    ("SubagentStop", False, {}, BLOCK, "block"),
    (
        "SubagentStop",
        False,
        {"impossible": True},
        {"systemMessage": f"The stop condition cannot be met: {REASON}"},
        "none",
    ),
    ("PreToolUse", False, {}, DENY | STOP, "block"),
    ("PreToolUse", True, {}, DENY, "deny"),
    ("PostToolUse", False, {}, BLOCK | STOP, "block"),
    ("PostToolUse", True, {}, BLOCK, "block"),
    ("PostToolBatch", False, {}, STOP, "block"),
    ("UserPromptSubmit", False, {}, STOP, "block"),
    ("UserPromptExpansion", False, {}, STOP, "block"),
    ("PostToolUseFailure", False, {}, BLOCK, "block"),
    ("PostToolUseFailure", False, {"impossible": True}, BLOCK, "block"),  # impossible: Stop events only
    ("TaskCreated", False, {}, BLOCK, "block"),
    ("TaskCompleted", False, {}, BLOCK | STOP, "block"),
    ("TaskCompleted", True, {}, BLOCK, "block"),
    ("TeammateIdle", False, {}, STOP, "block"),
    ("TeammateIdle", True, {}, BLOCK, "block"),
    ("PermissionRequest", False, {}, {}, "none"),
    ("PermissionDenied", False, {}, {}, "none"),
]


@pytest.mark.parametrize(("event", "continue_on_block", "more", "expected", "label"), TABLE)
async def test_not_ok_per_event(
    prompt: Prompt, event: str, continue_on_block: bool, more: dict[str, Any], expected: dict[str, Any], label: str
) -> None:
    result = await prompt(event, answer(ok=False, reason=REASON, **more), continueOnBlock=continue_on_block)
    assert result.outcome is Outcome.OK
    assert result.output == expected
    assert REASON in (result.reason or "")  # the model's reason is logged even when it has no effect
    assert merge_results(event, [result]).decision == label


@pytest.mark.parametrize("event", ["Stop", "PreToolUse", "UserPromptSubmit", "TeammateIdle"])
async def test_ok_is_no_opinion(prompt: Prompt, event: str) -> None:
    result = await prompt(event, answer(ok=True, reason="looks fine"))
    assert (result.outcome, result.output) == (Outcome.OK, {})


# ---- reading the model's reply ------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "reply", "expected"),
    [
        ("Stop", {"decision": "block", "reason": REASON}, BLOCK),
        ("Stop", {"decision": "approve", "reason": "fine"}, {}),
        ("Stop", {"decision": "approve", "systemMessage": "note to the user"}, {"systemMessage": "note to the user"}),
        ("PermissionDenied", {"decision": "block", "reason": REASON, "systemMessage": "discarded"}, {}),
        (
            "Stop",
            {"decision": "block", "reason": REASON, "continue": False, "stopReason": "halt"},
            BLOCK | {"continue": False, "stopReason": "halt"},
        ),
    ],
)
async def test_legacy_reply(prompt: Prompt, event: str, reply: dict[str, Any], expected: dict[str, Any]) -> None:
    result = await prompt(event, text(json.dumps(reply)))
    assert (result.outcome, result.output) == (Outcome.OK, expected)


@pytest.mark.parametrize(
    "reply",
    [
        f'```json\n{{"ok": false, "reason": "{REASON}"}}\n```',
        f'Let me think. The answer is {{"ok": false, "reason": "{REASON}"}} as requested.',
        f'Notes {{not json}} then {{"meta": 1}} and finally {{"ok": false, "reason": "{REASON}", "x": {{"y": 2}}}}',
    ],
)
async def test_fenced_or_wrapped_reply(prompt: Prompt, reply: str) -> None:
    result = await prompt("Stop", text(reply))
    assert (result.outcome, result.output) == (Outcome.OK, BLOCK)


@pytest.mark.parametrize("reply", ["Sure, that looks fine to me.", '{"ok": "maybe"}', '{"decision": "allow"}', ""])
async def test_garbage_reply_is_a_non_blocking_error(prompt: Prompt, reply: str) -> None:
    result = await prompt("PreToolUse", text(reply))
    assert result.outcome is Outcome.ERROR and result.output is None
    assert merge_results("PreToolUse", [result]).output == {}


async def test_not_ok_without_reason_still_blocks(prompt: Prompt) -> None:
    result = await prompt("Stop", text('{"ok": false}'))
    assert result.output == {"decision": "block", "reason": DEFAULT_REASON}


# ---- failures -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scripted", "words"),
    [
        (
            Scripted(529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'),
            "529: Overloaded",
        ),
        (Scripted(401, b"nope"), "401: nope"),
        (Scripted(200, b"<html>not json</html>"), "not JSON"),
        (Scripted(200, b'{"type": "message", "content": "text"}'), "content blocks"),
        (Scripted(200, b'{"type": "message", "content": [{"type": "tool_use", "id": 1}]}'), "tool_use"),
    ],
)
async def test_bad_llm_answer_is_a_non_blocking_error(prompt: Prompt, scripted: Scripted, words: str) -> None:
    result = await prompt("PreToolUse", scripted)
    assert result.outcome is Outcome.ERROR and words in (result.reason or "")
    assert SECRET not in (result.reason or "")


async def test_timeout(prompt: Prompt, llm: FakeLlm) -> None:
    result = await prompt("PreToolUse", HANG, timeout=0.2)
    assert result.outcome is Outcome.TIMEOUT and "0.2s" in (result.reason or "")
    assert len(llm.seen) == 1


async def test_missing_api_key_is_an_error_without_a_call(
    prompt: Prompt, llm: FakeLlm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    result = await prompt("PreToolUse", answer(ok=False, reason=REASON))
    assert result.outcome is Outcome.ERROR and KEY_ENV in (result.reason or "")
    assert llm.seen == []


async def test_loopback_llm_refused_unless_allowed(llm: FakeLlm, services: Services) -> None:
    llm.reply(answer(ok=False, reason=REASON))
    handler = {"type": "prompt", "prompt": "$ARGUMENTS"}
    result = await run(context(llm_policy(llm.url, "PreToolUse", handler, networks=()), "PreToolUse", services))
    assert result.outcome is Outcome.ERROR and "allowedNetworks" in (result.reason or "")
    assert llm.seen == []


def test_client_repr_masks_the_key(llm: FakeLlm, services: Services) -> None:
    policy = policy_from_text(llm_policy(llm.url, "Stop", {"type": "prompt", "prompt": "x"}))
    client = LlmClient.for_policy(services, policy)
    assert SECRET not in repr(client) and "***" in repr(client)


# ---- the full path ------------------------------------------------------------------------


async def test_full_path_gateway_to_llm_and_back(llm: FakeLlm, platform: Callable[..., Any]) -> None:
    pre = {"matcher": "Bash", "hooks": [{"type": "prompt", "prompt": "Is this safe? $ARGUMENTS"}]}
    text_ = llm_policy(llm.url, "Stop", {"type": "prompt", "prompt": "Done?"}, extra_hooks={"PreToolUse": [pre]})
    llm.reply(answer(ok=False, reason="force pushes are not allowed"), text('```json\n{"ok": true}\n```'))
    async with platform(text_) as p:
        denied = await p.post(event_input("PreToolUse", session="s-full"))
        stopped = await p.post(event_input("Stop", session="s-full", stop_hook_active=False))
    assert denied.status_code == 200 and denied.headers["x-hookbus-outcome"] == "decided"
    assert denied.json() == {
        "continue": False,
        "stopReason": "force pushes are not allowed",
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "force pushes are not allowed",
        },
    }
    assert stopped.json() == {}
    assert [s.headers["x-api-key"] for s in llm.seen] == [SECRET, SECRET]
    assert '"command":"git push --force"' in llm.seen[0].prompt and llm.seen[1].prompt.startswith("Done?\n\n")
