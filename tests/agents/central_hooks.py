"""Central hooks for the real-agent tests: ``command`` handlers the dispatcher runs (not the agent).

``python central_hooks.py ACTION`` reads a canonical hook input on stdin and prints a Claude
Code hook output: the agent only ever sees it translated by its dialect.

- ``rewrite``: PreToolUse ``allow`` with ``updatedInput`` whose command is ``touch rewritten.txt``.
- ``stop``: blocks the first Stop of a turn (``stop_hook_active`` false) with :data:`STOP_REASON`,
  when the input mentions :data:`STOP_TRIGGER` (the model's last message does).
- ``context``: adds :data:`CONTEXT` to the event when the input mentions :data:`CONTEXT_TRIGGER`
  (the prompt does).

The triggers keep one policy usable by every scenario of a test module.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

STOP_REASON = "hookbus-stop-marker: run the tests before you stop"
CONTEXT = "hookbus-context-marker: the central policy says hello"
REWRITTEN = "touch rewritten.txt"
STOP_TRIGGER = "please-block-my-stop"
CONTEXT_TRIGGER = "please-add-context"


def command(action: str) -> str:
    """The ``command`` handler line that runs ``action`` with this interpreter."""
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} {action}"


def answer(action: str, hook_input: dict[str, object]) -> dict[str, object]:
    event = str(hook_input.get("hook_event_name"))
    if action == "rewrite":
        tool_input = dict(hook_input.get("tool_input") or {})  # type: ignore[call-overload]
        tool_input["command"] = REWRITTEN
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": "hookbus rewrote the command",
                "updatedInput": tool_input,
            }
        }
    mentioned = json.dumps(hook_input)
    if action == "stop":
        if hook_input.get("stop_hook_active") or STOP_TRIGGER not in mentioned:
            return {}
        return {"decision": "block", "reason": STOP_REASON}
    if action == "context":
        if CONTEXT_TRIGGER not in mentioned:
            return {}
        return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": CONTEXT}}
    raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    print(json.dumps(answer(sys.argv[1], json.load(sys.stdin))))
