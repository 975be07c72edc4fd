"""A scripted agent loop (no LLM) that asks hookbus before and after everything it does.

    hookbus up --config examples/agent_loop_policy.yaml
    python examples/agent_loop.py --url http://127.0.0.1:8787

The "model" is a fixed script of tool calls. Around it the loop emits SessionStart,
UserPromptSubmit, PreToolUse, PostToolUse and Stop through the SDK (a :class:`LocalHooks`
with one local hook in front of a :class:`HookBusClient`) and follows the central
decisions: a call runs only when it is ``allowed``; a blocked call is not run and the reason
goes back to the "model"; a call the policy ``asks`` about runs only when the person at the
terminal says yes (with no terminal on stdin there is no one to ask, and it is not run); a
modified input is what runs, added context is handed to the "model", and a blocked Stop makes
the agent do one more turn. Tools are simulated: nothing is executed or written.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hookbus.client import Decision, HookBusClient
from hookbus.local_hooks import LocalHooks

PROMPT = "Tidy up the build directory and write down what is left to do."
#: The scripted "model": the tool calls of each turn (the second turn comes after a blocked Stop).
TURNS: list[list[tuple[str, dict[str, Any]]]] = [
    [
        ("Bash", {"command": "ls -la build"}),
        ("Bash", {"command": "rm -rf build /"}),
        ("Bash", {"command": "git push origin main"}),
        ("Write", {"file_path": "notes/todo.md", "content": "- ship the release\n"}),
    ],
    [("Bash", {"command": "pytest -q"})],
]


def say(event: str, text: str) -> None:
    print(f"[{event}] {text}", flush=True)


def short(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))


def describe(decision: Decision) -> str:
    """One line about a decision: blocked / asks / deferred / modified / context / allowed."""
    parts = []
    if decision.blocked:
        parts.append(f"BLOCKED: {decision.reason}")
    if decision.asks:
        parts.append(f"ASKS: {decision.reason}")
    if decision.defers:
        parts.append(f"DEFERRED: {decision.reason}")
    if decision.updated_input is not None:
        parts.append(f"input modified -> {short(decision.updated_input)}")
    if decision.additional_context:
        parts.append(f"context added: {decision.additional_context.strip()}")
    if decision.outcome == "fail-open":
        parts.append(f"hookbus unavailable, failing open ({decision.error})")
    elif decision.outcome == "fail-closed":
        parts.append(f"hookbus unavailable, failing closed ({decision.error})")
    return "; ".join(parts) or f"allowed ({decision.outcome})"


def confirm(tool: str, tool_input: dict[str, Any], reason: str | None) -> bool:
    """Ask the person at the terminal whether a call the policy asks about may run; False
    (not run) when nobody answers yes, or when stdin is not a terminal: no one to ask."""
    if not sys.stdin.isatty():
        say("confirm", f"no one to ask (stdin is not a terminal): {tool} is not run")
        return False
    say("confirm", reason or "the policy asks for confirmation")
    try:
        answer = input(f"[confirm] run {tool} {short(tool_input)}? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def run_tool(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A pretend tool: returns what the tool would have returned."""
    if name == "Bash":
        return {"stdout": f"(simulated output of: {tool_input['command']})", "stderr": "", "interrupted": False}
    return {"type": "create", "filePath": tool_input.get("file_path"), "content": tool_input.get("content", "")}


def agent_loop(engine: LocalHooks) -> dict[str, int]:
    """Run the script through the hooks; returns counts for the summary line."""
    counts = {"tool_calls": 0, "blocked": 0, "asked": 0, "confirmed": 0, "modified": 0, "context": 0, "turns": 0}
    context: list[str] = []

    def note_context(decision: Decision) -> None:
        if decision.additional_context:
            context.append(decision.additional_context.strip())
            counts["context"] += 1

    start = engine.emit("SessionStart", source="startup", model="scripted")
    say("SessionStart", describe(start))
    note_context(start)
    prompt = engine.emit("UserPromptSubmit", prompt=PROMPT)
    say("UserPromptSubmit", f"{PROMPT!r} -> {describe(prompt)}")
    if prompt.blocked:
        return counts
    note_context(prompt)
    stop_hook_active = False
    for calls in TURNS:
        counts["turns"] += 1
        ran: list[str] = []
        for number, (tool, tool_input) in enumerate(calls, 1):
            counts["tool_calls"] += 1
            tool_use_id = f"toolu_{counts['turns']}_{number}"
            pre = engine.emit("PreToolUse", tool_name=tool, tool_input=tool_input, tool_use_id=tool_use_id)
            say("PreToolUse", f"{tool} {short(tool_input)} -> {describe(pre)}")
            note_context(pre)
            counts["asked"] += pre.asks
            confirmed = pre.asks and confirm(tool, tool_input, pre.reason)
            counts["confirmed"] += confirmed
            if not (pre.allowed or confirmed):  # blocked, deferred, or asked and not confirmed
                counts["blocked"] += not pre.asks
                refusal = f"not confirmed: {pre.reason}" if pre.asks else pre.reason
                context.append(f"tool error for {tool}: {refusal}")  # what the model is told
                continue
            if pre.updated_input is not None:
                counts["modified"] += 1
                tool_input = pre.updated_input
            response = run_tool(tool, tool_input)
            ran.append(tool_input.get("command") or f"{tool} {tool_input.get('file_path')}")
            post = engine.emit(
                "PostToolUse", tool_name=tool, tool_input=tool_input, tool_response=response, tool_use_id=tool_use_id
            )
            say("PostToolUse", f"{tool} -> {describe(post)}")
            note_context(post)
        last = f"Done. I ran: {'; '.join(ran)}"
        stop = engine.emit("Stop", stop_hook_active=stop_hook_active, last_assistant_message=last)
        say("Stop", describe(stop))
        if not stop.blocked:
            break
        context.append(f"stop hook feedback: {stop.reason}")
        stop_hook_active = True
    say(
        "summary",
        f"{counts['tool_calls']} tool calls, {counts['blocked']} blocked, "
        f"{counts['asked']} asked ({counts['confirmed']} confirmed), {counts['modified']} modified, "
        f"{counts['context']} context additions, {counts['turns']} turns",
    )
    for line in context:
        say("model context", line)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A scripted agent loop that asks hookbus.")
    parser.add_argument("--url", default=None, help="gateway URL (default $HOOKBUS_URL or http://127.0.0.1:8787)")
    parser.add_argument("--fail-closed", action="store_true", help="treat an unreachable gateway as a block")
    args = parser.parse_args(argv)
    with HookBusClient(args.url, fail_closed=args.fail_closed) as client:
        engine = LocalHooks(client)
        # A local hook (a log hook) runs before the central policy is asked.
        engine.register_hook("PreToolUse", lambda hook_input: say("local", f"about to call {hook_input['tool_name']}"))
        say("session", f"{client.session_id} -> {client.url}")
        agent_loop(engine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
