"""Claude Code ``agent`` hooks: a multi-turn LLM loop with tools, ending in ``{"ok", "reason"}``.

The first user message is the handler's prompt with ``$ARGUMENTS`` filled in, exactly as for
a ``prompt`` hook (:func:`workers.handlers.prompt.render_prompt`). The model may then call tools for up
to :data:`MAX_TURNS` LLM calls; tool results go back as ``tool_result`` blocks. The loop ends
when the model answers with text holding the verdict JSON. A reply with neither a tool call
nor a verdict gets one reminder; a second one is a non-blocking error, and so is running
out of turns. Default timeout 60 s, for the whole loop.

**Tools.** Claude Code's agent hooks read the agent's files (Read, Grep, Glob); a central
service has no access to them, so it offers what it honestly holds instead:

* ``recent_events(limit)`` — this session's recent events with their decisions, from the
  decision log (same tenant and ``session_id``; newest ``limit``, at most
  :data:`MAX_EVENTS`, listed oldest first), each as ``{event, tool_name, decision, reason,
  time, tool_input | prompt}`` with long values cut. The newest :data:`SCAN_LIMIT` records
  of the whole log are looked at: every partition's, merged by id.
* ``hook_input()`` — the current event's input JSON.

**Verdict.** ``ok: false`` is handled like a prompt hook with ``continueOnBlock: true`` and
without ``impossible``: see :func:`workers.handlers.prompt.verdict_output`. Agent hooks
do not run on PermissionRequest (skipped, no LLM call).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, Final

import orjson

from bus.decisionlog.reader import read_merged
from bus.errors import BusUnavailable, LlmError, LlmTimeout, ProtocolError, ToolError
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import AgentHandler
from bus.redis.connection import redis_errors
from bus.stream.partitions import bus_keyspace
from bus.stream.protocol import LogRecord
from workers.handlers.context import HookContext
from workers.handlers.prompt import input_json, parse_verdict, render_prompt, verdict_result
from workers.outbound.llm import LlmClient, ToolUse

MAX_TURNS: Final = 50
MAX_TOKENS: Final = 1024
DEFAULT_EVENTS: Final = 20
MAX_EVENTS: Final = 50
#: Decision-log entries read at most per ``recent_events`` call, and per XREVRANGE page (of one partition).
SCAN_LIMIT: Final = 5_000
PAGE: Final = 500
VALUE_CHARS: Final = 300

SYSTEM_PROMPT: Final = (
    "You evaluate a hook of a coding agent (Claude Code) for a central policy service. The user message holds "
    "your instructions and the hook's input as JSON. You may call the tools to look at this session's recent "
    "events and decisions before you decide whether the condition in the instructions is met.\n"
    "When you have decided, answer with ONLY this JSON object, no other text and no code fences:\n"
    '{"ok": true} when the condition is met, or {"ok": false, "reason": "<why, addressed to the agent>"} '
    "when it is not."
)
REMINDER: Final = 'Answer now with only the JSON object: {"ok": true} or {"ok": false, "reason": "..."}.'

TOOLS: Final = (
    {
        "name": "recent_events",
        "description": "This session's most recent hook events (oldest first) with the decision hookbus returned: "
        "event, tool_name, decision, reason, time and the tool input or prompt.",
        "input_schema": {
            "type": "object",
            "properties": {
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_EVENTS,
                    "description": f"how many events (default {DEFAULT_EVENTS})",
                }
            },
        },
    },
    {
        "name": "hook_input",
        "description": "The full input JSON of the hook event being evaluated.",
        "input_schema": {"type": "object", "properties": {}},
    },
)


def _cut(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "…"


def _reason(output: dict[str, Any]) -> str | None:
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    request = specific.get("decision")
    for value in (
        output.get("reason"),
        specific.get("permissionDecisionReason"),
        output.get("stopReason"),
        request.get("message") if isinstance(request, dict) else None,
    ):
        if isinstance(value, str) and value:
            return value
    return None


def compact_record(record: LogRecord) -> dict[str, Any]:
    """One decision-log record as ``recent_events`` shows it to the model."""
    when = datetime.datetime.fromtimestamp(record.received_ms / 1000, datetime.UTC)
    out: dict[str, Any] = {"event": record.event, "time": when.isoformat(timespec="milliseconds")}
    if record.tool_name:
        out["tool_name"] = record.tool_name
    out["decision"] = record.decision
    if reason := _reason(record.output):
        out["reason"] = _cut(reason)
    try:
        hook_input = orjson.loads(record.payload)
    except orjson.JSONDecodeError:
        hook_input = {}
    for key in ("tool_input", "prompt"):
        if isinstance(hook_input, dict) and hook_input.get(key) is not None:
            out[key] = _cut(hook_input[key])
    return out


async def recent_events(ctx: HookContext, limit: int = DEFAULT_EVENTS) -> list[dict[str, Any]]:
    """This session's newest ``limit`` decision-log records (same tenant), oldest first."""
    services = ctx.services
    if services is None or services.redis is None:
        raise ToolError("the decision log is not reachable from here")
    redis = services.redis
    session = str(ctx.hook_input.get("session_id", ""))
    found: list[dict[str, Any]] = []
    scanned = 0
    with redis_errors():
        keys = await bus_keyspace(redis, services.keys)
        entries = read_merged(redis, keys.decision_logs, page=PAGE, reverse=True)
        try:
            async for entry in entries:
                scanned += 1
                try:
                    record = LogRecord.decode(entry.fields)
                except ProtocolError:
                    record = None
                if (
                    record is not None
                    and record.tenant == ctx.request.tenant
                    and record.session_id == session
                    and record.event_id != ctx.request.event_id
                ):
                    found.append(compact_record(record))
                if len(found) >= limit or scanned >= SCAN_LIMIT:
                    break
        finally:
            await entries.aclose()
    return found[::-1]


async def call_tool(ctx: HookContext, use: ToolUse) -> dict[str, Any]:
    """Run one tool call; the ``tool_result`` block for it (``is_error`` when it failed)."""
    try:
        if use.name == "recent_events":
            raw = use.input.get("limit", DEFAULT_EVENTS)
            limit = raw if isinstance(raw, int) and not isinstance(raw, bool) else DEFAULT_EVENTS
            result: Any = await recent_events(ctx, max(1, min(limit, MAX_EVENTS)))
        elif use.name == "hook_input":
            result = ctx.hook_input
        else:
            raise ToolError(f"unknown tool {use.name!r}; the tools are recent_events and hook_input")
    except (ToolError, BusUnavailable) as exc:
        return {"type": "tool_result", "tool_use_id": use.id, "content": str(exc), "is_error": True}
    return {"type": "tool_result", "tool_use_id": use.id, "content": orjson.dumps(result).decode()}


async def _loop(ctx: HookContext, handler: AgentHandler, client: LlmClient) -> HandlerResult:
    messages: list[dict[str, Any]] = [{"role": "user", "content": render_prompt(handler.prompt, input_json(ctx))}]
    reminded = False
    for _ in range(MAX_TURNS):
        reply = await client.create(
            system=SYSTEM_PROMPT,
            messages=messages,
            model=handler.model,
            max_tokens=MAX_TOKENS,
            tools=TOOLS,
            timeout_s=ctx.timeout_s,
        )
        if not reply.content:
            return HandlerResult(Outcome.ERROR, reason="agent hook: the model sent an empty reply")
        messages.append({"role": "assistant", "content": reply.content})
        if uses := reply.tool_uses:
            messages.append({"role": "user", "content": [await call_tool(ctx, use) for use in uses]})
            continue
        try:
            verdict = parse_verdict(reply.text)
        except ValueError as exc:
            if reminded:
                return HandlerResult(Outcome.ERROR, reason=f"agent hook: unusable model reply: {exc}")
            reminded = True
            messages.append({"role": "user", "content": REMINDER})
            continue
        return verdict_result(ctx.event, verdict, continue_on_block=True, impossible=False)
    return HandlerResult(Outcome.ERROR, reason=f"agent hook: no verdict within {MAX_TURNS} turns")


async def run(ctx: HookContext) -> HandlerResult:
    """Run one ``agent`` handler on one event."""
    handler = ctx.entry.handler
    if not isinstance(handler, AgentHandler):
        return HandlerResult(Outcome.ERROR, reason=f"not an agent handler: {handler.type}")
    if ctx.event == "PermissionRequest":
        return HandlerResult(Outcome.OK, output={}, reason="agent hooks do not run on PermissionRequest")
    try:
        client = LlmClient.for_policy(ctx.services, ctx.policy)
        async with asyncio.timeout(ctx.timeout_s):
            return await _loop(ctx, handler, client)
    except (TimeoutError, LlmTimeout):
        return HandlerResult(Outcome.TIMEOUT, reason=f"agent hook: no verdict within {ctx.timeout_s:g}s")
    except LlmError as exc:
        return HandlerResult(Outcome.ERROR, reason=f"agent hook: {exc}")


__all__ = ["MAX_TURNS", "SYSTEM_PROMPT", "TOOLS", "ToolError", "call_tool", "compact_record", "recent_events", "run"]
