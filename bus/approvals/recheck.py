"""An approver's edited tool input, checked against the policy again before it is sent.

An edit must not smuggle in what the policy denies: the edited call goes through every
``rule`` handler that would run on it (its ``agents``, group matcher and ``if``), and the
first ``deny`` rule it meets refuses the edit. A blocking handler of another type (``command``,
``http``, ``prompt``, ...) that would run on the edited call cannot be run again here, so an
edit it would judge is refused too: what cannot be judged is never allowed. (An ``ask`` a rule
meets is what the approver is answering.)
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from bus.policy.compiled import Policy, compiled
from bus.policy.rulelists import first_verdict

#: The largest edited tool input an approver may send, in bytes of JSON.
MAX_EDITED_INPUT_BYTES: Final = 64 * 1024


def edit_refusal(policy: Policy, hook_input: dict[str, Any], edited: Any, agent: str) -> str | None:
    """Why the edited input ``edited`` of ``hook_input``'s call cannot be sent, or None."""
    if not isinstance(edited, dict):
        return "the edited input must be a JSON object (the whole tool input)"
    if len(orjson.dumps(edited)) > MAX_EDITED_INPUT_BYTES:
        return f"the edited input is over {MAX_EDITED_INPUT_BYTES} bytes"
    call = {**hook_input, "tool_input": edited}
    event = str(call.get("hook_event_name", "PreToolUse"))
    for handler in compiled(policy).select(event, call, agent):
        if handler.rules is None:
            if handler.run_async:
                continue  # runs after the call; it cannot deny it
            return (
                f"the edited input cannot be checked here: a {handler.handler_type} handler would judge it"
                " (approve it unedited, or deny it)"
            )
        found = first_verdict(handler.rules, call)
        if found is not None and found[0] == "deny":
            return f"the policy denies the edited input (rule {found[1]})"
    return None


__all__ = ["MAX_EDITED_INPUT_BYTES", "edit_refusal"]
