"""The model tokens an event says were spent: what the built-in ``tokens`` counter adds up.

Only what an agent's hook input really carries is counted; every other event adds nothing.

* Gemini CLI's ``AfterModel`` (its own name, passed through by :mod:`bus.dialects.gemini`):
  ``llm_response.usageMetadata.totalTokenCount``. Gemini sends ``AfterModel`` once per streamed
  chunk; only the chunk that ends the response (a candidate with a ``finishReason``) is counted,
  its usage covering the whole model call, so a call is counted once however many chunks it had.
* Claude Code's ``PostToolUse`` of a subagent (the ``Agent`` or ``Task`` tool):
  ``tool_response.totalTokens``, the tokens the subagent spent. Claude Code's own turns carry
  no usage in any hook input.

Not counted, on purpose: Qwen Code's ``Stop`` ``input_tokens`` (the size of the context sent
last, not what was spent: it would count a long session's context again every turn), and
Claude Code's ``context_tokens`` / ``estimated_cache_write_usd`` (``SessionStart``,
``PreModelSwitch``: the context's size and an estimate of a cache write to come). No hook input
of any agent hookbus speaks carries a spent cost in money, so there is no cost counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: Claude Code's subagent tool (``Task`` before it was renamed ``Agent``).
SUBAGENT_TOOLS: Final = frozenset({"Agent", "Task"})


def _count(value: object) -> int:
    """A token count as sent: a non-negative whole number (a bool, a float or text is none)."""
    return value if type(value) is int and value > 0 else 0


def tokens_spent(event: str, hook_input: Mapping[str, Any]) -> int:
    """The tokens ``event``'s input says were spent (0 when it says nothing)."""
    if event == "PostToolUse":
        if hook_input.get("tool_name") not in SUBAGENT_TOOLS:
            return 0
        response = hook_input.get("tool_response")
        return _count(response.get("totalTokens")) if isinstance(response, dict) else 0
    if event == "AfterModel":
        response = hook_input.get("llm_response")
        if not isinstance(response, dict):
            return 0
        candidates = response.get("candidates")
        if not isinstance(candidates, list) or not any(
            isinstance(c, dict) and c.get("finishReason") for c in candidates
        ):
            return 0  # a chunk before the last: the last one's usage covers the whole call
        usage = response.get("usageMetadata")
        return _count(usage.get("totalTokenCount")) if isinstance(usage, dict) else 0
    return 0


__all__ = ["SUBAGENT_TOOLS", "tokens_spent"]
