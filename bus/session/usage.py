"""The model tokens and money an event says were spent: the built-in ``tokens`` and ``cost_usd``
counters.

Only what an agent's hook input really carries is counted; every other event adds nothing.

* Gemini CLI's ``AfterModel`` (its own name, passed through by :mod:`bus.dialects.gemini`):
  ``llm_response.usageMetadata.totalTokenCount``. Gemini sends ``AfterModel`` once per streamed
  chunk; only the chunk that ends the response (a candidate with a ``finishReason``) is counted,
  its usage covering the whole model call, so a call is counted once however many chunks it had.
* Claude Code's ``PostToolUse`` of a subagent (the ``Agent`` or ``Task`` tool):
  ``tool_response.totalTokens``, the tokens the subagent spent. Claude Code's own turns carry
  no usage in any hook input.
* OpenCode's ``session.idle`` (Stop, :mod:`bus.dialects.opencode`): ``sessionUsage``, which
  hookbus's plugin adds up from the session's assistant messages as OpenCode records them
  (each one's ``cost`` in USD and its ``tokens``: input, output, reasoning, cache read and
  write). These are the session's totals so far: they replace a lower count rather than add
  to it (:func:`session_totals`), so every turn's idle counts what is new once.

Not counted, on purpose: Qwen Code's ``Stop`` ``input_tokens`` (the size of the context sent
last, not what was spent: it would count a long session's context again every turn), and
Claude Code's ``context_tokens`` / ``estimated_cache_write_usd`` (``SessionStart``,
``PreModelSwitch``: the context's size and an estimate of a cache write to come). No hook input
of any other agent hookbus speaks carries a spent cost in money: ``cost_usd`` counts OpenCode's only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

#: How the cost is kept: whole micro-dollars (a session's state holds integers).
MICRO_USD: Final = 1_000_000
#: Claude Code's subagent tool (``Task`` before it was renamed ``Agent``).
SUBAGENT_TOOLS: Final = frozenset({"Agent", "Task"})


#: Above this, a count is none: no model call spends it, and the state's integers must not overflow.
_MOST: Final = 10**12


def _count(value: object) -> int:
    """A token count as sent: a whole number above 0 (a bool, a float, text or an absurd one is none)."""
    return value if type(value) is int and 0 < value < _MOST else 0


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


def session_totals(event: str, hook_input: Mapping[str, Any]) -> tuple[int, int] | None:
    """The session's tokens and cost (micro-dollars) so far, where an event reports its totals
    (OpenCode's ``session.idle``), else None."""
    if event != "Stop" or hook_input.get("agent_event_name") != "session.idle":
        return None
    usage = hook_input.get("sessionUsage")
    if not isinstance(usage, dict):
        return None
    cost = usage.get("costUsd")
    micro = 0
    if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost):
        micro = round(cost * MICRO_USD)
        micro = micro if 0 < micro < _MOST else 0  # nothing, or a sum no session spends (a million dollars)
    return _count(usage.get("tokens")), micro


__all__ = ["MICRO_USD", "SUBAGENT_TOOLS", "session_totals", "tokens_spent"]
