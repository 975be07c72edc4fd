"""Claude Code ``prompt`` hooks: one LLM call that answers ``{"ok", "reason", "impossible"}``.

**The call.** The handler's ``prompt`` with ``$ARGUMENTS`` replaced by the hook input JSON
(``\\$`` stands for a literal ``$``); without ``$ARGUMENTS`` the JSON is appended after a
blank line. The system prompt asks for the verdict JSON only. The model is the handler's
``model``, else ``hookbus.llm.model``. Default timeout 30 s (the engine applies it; so does
the runner, for direct calls).

**The answer.** The first JSON object in the reply text that has ``ok`` (or the legacy
``decision``) is the verdict, so code fences and prose around it are tolerated. The legacy
form ``{"decision": "approve"|"block", "reason", "continue", "stopReason", "systemMessage"}``
is accepted: ``block`` is ``ok: false``, and its ``continue``/``stopReason``/
``systemMessage`` are passed on. A reply with no verdict is a non-blocking error.

**The effect of ``ok: false``**, as the Claude Code output an http hook returns.
"Turn ends with a warning" is ``continue: false`` + ``stopReason`` (the universal "stop
Claude, show the user why"); "reason to Claude" is the event's own blocking field:

=========================================  =================================================
Stop, SubagentStop                         ``decision: block`` + reason (Claude continues);
                                           with ``impossible: true`` no block, only a
                                           ``systemMessage`` (the turn ends)
PreToolUse                                 ``permissionDecision: deny`` + reason; unless
                                           ``continueOnBlock``: also ``continue: false``
PostToolUse                                ``decision: block`` + reason; unless
                                           ``continueOnBlock``: also ``continue: false``
PostToolBatch, UserPromptSubmit,           ``continue: false`` + ``stopReason`` (turn ends,
UserPromptExpansion                        reason shown); ``continueOnBlock`` is not read
PostToolUseFailure, TaskCreated            ``decision: block`` + reason (a tool error)
TaskCompleted                              ``decision: block`` + reason; unless
                                           ``continueOnBlock``: also ``continue: false``
                                           (read only when a teammate stop triggered it)
TeammateIdle                               ``continue: false`` (the teammate stops);
                                           ``continueOnBlock``: ``decision: block`` instead
PermissionRequest, PermissionDenied        no effect (``{}``); the verdict is only logged
other events with a top-level decision     ``decision: block`` + reason
=========================================  =================================================

``ok: true`` is ``{}`` (plus a legacy ``systemMessage``). The model's reason is kept as the
result's ``reason`` either way, so the decision log shows why.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from typing import Any, Final

import orjson

from bus.errors import LlmError, LlmTimeout, OutputSchemaError
from bus.hooks.events import STOP_EVENTS, event_spec
from bus.hooks.output import check_output
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import PromptHandler
from workers.handlers.context import HookContext
from workers.outbound.llm import LlmClient

MAX_TOKENS: Final = 1024
DEFAULT_REASON: Final = "a prompt hook rejected this without giving a reason"

SYSTEM_PROMPT: Final = (
    "You evaluate a hook of a coding agent (Claude Code). The user message holds your instructions and the "
    "hook's input as JSON. Decide whether the condition in the instructions is met.\n"
    "Answer with ONLY this JSON object, no other text and no code fences:\n"
    '{"ok": true} when the condition is met, or {"ok": false, "reason": "<why, addressed to the agent>"} '
    "when it is not."
)
STOP_ADDENDUM: Final = (
    '\nIf the condition can never be met, add "impossible": true to the ok: false answer: the agent then '
    "stops instead of trying again."
)

_ARGUMENTS = re.compile(r"\\\$|\$ARGUMENTS")
_TURN_ENDS = frozenset({"PostToolBatch", "UserPromptSubmit", "UserPromptExpansion"})
_TOOL_ERROR = frozenset({"PostToolUseFailure", "TaskCreated"})
_NO_EFFECT = frozenset({"PermissionRequest", "PermissionDenied"})
_LEGACY_FIELDS = ("continue", "stopReason", "systemMessage")


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What the model said. ``extra`` holds a legacy reply's universal output fields."""

    ok: bool
    reason: str | None = None
    impossible: bool = False
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def render_prompt(template: str, input_json: str) -> str:
    """``template`` with ``$ARGUMENTS`` replaced by ``input_json`` (``\\$`` → ``$``), or the JSON appended."""
    used = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal used
        if match.group() == "\\$":
            return "$"
        used = True
        return input_json

    text = _ARGUMENTS.sub(substitute, template)
    return text if used else f"{text}\n\n{input_json}"


def _first_verdict_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(value, dict) and ("ok" in value or "decision" in value):
            return value
    return None


def parse_verdict(text: str) -> Verdict:
    """The verdict in a model's reply text; ValueError when there is none."""
    obj = _first_verdict_object(text)
    if obj is None:
        raise ValueError('the model\'s reply holds no {"ok": ...} JSON object')
    reason = obj.get("reason")
    if reason is not None and not isinstance(reason, str):
        reason = json.dumps(reason)
    if "ok" in obj:
        if not isinstance(obj["ok"], bool):
            raise ValueError(f"'ok' must be true or false, got {obj['ok']!r}")
        return Verdict(obj["ok"], reason or None, obj.get("impossible") is True)
    decision = obj["decision"]
    if decision not in ("approve", "block"):
        raise ValueError(f"legacy 'decision' must be approve or block, got {decision!r}")
    extra = {key: obj[key] for key in _LEGACY_FIELDS if obj.get(key) is not None}
    return Verdict(decision == "approve", reason or None, extra=extra)


def verdict_output(event: str, verdict: Verdict, *, continue_on_block: bool, impossible: bool = True) -> dict[str, Any]:
    """The Claude Code output for ``verdict`` on ``event`` (see the module table), not yet schema-checked.

    ``impossible=False`` ignores the model's ``impossible`` (agent hooks do not support it).
    """
    if event in _NO_EFFECT:
        return {}
    out = dict(verdict.extra)
    if verdict.ok:
        return out
    reason = verdict.reason or DEFAULT_REASON
    block = {"decision": "block", "reason": reason}

    def stop() -> None:
        out["continue"] = False
        out.setdefault("stopReason", reason)

    if event in STOP_EVENTS:
        if verdict.impossible and impossible:
            out.setdefault("systemMessage", f"The stop condition cannot be met: {reason}")
        else:
            out.update(block)
    elif event == "PreToolUse":
        out["hookSpecificOutput"] = {
            "hookEventName": event,
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
        if not continue_on_block:
            stop()
    elif event in ("PostToolUse", "TaskCompleted"):
        out.update(block)
        if not continue_on_block:
            stop()
    elif event in _TURN_ENDS:
        stop()
    elif event in _TOOL_ERROR:
        out.update(block)
    elif event == "TeammateIdle":
        if continue_on_block:
            out.update(block)
        else:
            stop()
    elif event_spec(event).top_level_decision:
        out.update(block)
    return out


def verdict_result(event: str, verdict: Verdict, *, continue_on_block: bool, impossible: bool = True) -> HandlerResult:
    """:func:`verdict_output` checked against ``event``'s output schema, as an ``OK`` result."""
    output = verdict_output(event, verdict, continue_on_block=continue_on_block, impossible=impossible)
    try:
        output = check_output(event, output)
    except OutputSchemaError as exc:
        return HandlerResult(Outcome.ERROR, reason=f"verdict does not fit {event}'s output: {exc}")
    note = "ok" if verdict.ok else "not ok"
    return HandlerResult(Outcome.OK, output=output, reason=f"{note}: {verdict.reason}" if verdict.reason else note)


def input_json(ctx: HookContext) -> str:
    """The hook input as the compact JSON text that ``$ARGUMENTS`` stands for."""
    return orjson.dumps(ctx.hook_input).decode()


async def run(ctx: HookContext) -> HandlerResult:
    """Run one ``prompt`` handler on one event."""
    handler = ctx.entry.handler
    if not isinstance(handler, PromptHandler):
        return HandlerResult(Outcome.ERROR, reason=f"not a prompt handler: {handler.type}")
    system = SYSTEM_PROMPT + (STOP_ADDENDUM if ctx.event in STOP_EVENTS else "")
    messages = [{"role": "user", "content": render_prompt(handler.prompt, input_json(ctx))}]
    try:
        client = LlmClient.for_policy(ctx.services, ctx.policy)
        async with asyncio.timeout(ctx.timeout_s):
            reply = await client.create(
                system=system, messages=messages, model=handler.model, max_tokens=MAX_TOKENS, timeout_s=ctx.timeout_s
            )
    except (TimeoutError, LlmTimeout):
        return HandlerResult(Outcome.TIMEOUT, reason=f"prompt hook: no LLM answer within {ctx.timeout_s:g}s")
    except LlmError as exc:
        return HandlerResult(Outcome.ERROR, reason=f"prompt hook: {exc}")
    try:
        verdict = parse_verdict(reply.text)
    except ValueError as exc:
        return HandlerResult(Outcome.ERROR, reason=f"prompt hook: unusable model reply: {exc}")
    return verdict_result(ctx.event, verdict, continue_on_block=handler.continue_on_block)


__all__ = [
    "SYSTEM_PROMPT",
    "Verdict",
    "input_json",
    "parse_verdict",
    "render_prompt",
    "run",
    "verdict_output",
    "verdict_result",
]
