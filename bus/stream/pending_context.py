"""What ``async`` hooks leave for a session's next turn, and how that turn takes it.

An async hook's ``additionalContext`` and ``systemMessage`` cannot reach the agent with the
event that ran it (the agent was answered long before), so the worker keeps them, one JSON
item each, in the session's list ``{p}context:{tenant}:{session}`` (:func:`bus.redis.keys.Keyspace.pending_context`),
and the session's next blocking event whose output can carry ``additionalContext`` delivers
them. Claude Code does the same with its own async hooks: "delivered on the next conversation
turn".

That event takes the items *when it is appended*: on a single Redis the gateway appends it
with :data:`APPEND_TAKING_CONTEXT`, one script that pops the list and writes the items into the
stream entry (field ``c``, a JSON array, ``[]`` when there were none:
:attr:`bus.stream.protocol.Request.context`). Taking them then costs
no round trip of its own (the append is one anyway) and, since the items travel in the entry,
a dispatcher that dies mid-event leaves them to the one that claims the entry. On a Redis
Cluster the list and the stream live in different slots, which one script cannot touch, so
there the dispatcher pops the list itself while it evaluates the event (an entry without the
field ``c``), as does every dispatcher for entries of gateways that do not take context.
"""

from __future__ import annotations

import weakref
from typing import Any

import orjson

from bus.hooks.events import event_spec
from bus.policy.loading import Policy

#: How long a session's pending context waits for its next turn, in seconds.
CONTEXT_TTL_S = 3600
#: Items one session's list keeps (the oldest go first).
MAX_PENDING_CONTEXT = 50
#: Items one turn takes at most (the rest wait for the next one).
CONTEXT_BATCH = 1000

#: Append a stream entry and take the session's pending context into it, atomically.
#: KEYS: the stream, the session's context list. ARGV: MAXLEN (approximate), how many items to
#: take at most, then the entry's field/value pairs. Returns the entry id.
APPEND_TAKING_CONTEXT = """
local items = redis.call('LPOP', KEYS[2], ARGV[2])
local taken = '[]'
if items then taken = '[' .. table.concat(items, ',') .. ']' end
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'c', taken, unpack(ARGV, 3))
"""

#: Per policy (each tenant's, each reload's), dropped with it.
_ASYNC_SEEN: weakref.WeakKeyDictionary[Policy, bool] = weakref.WeakKeyDictionary()


def has_async_handlers(policy: Policy) -> bool:
    """Whether any handler of ``policy`` is ``async`` (only then can context be pending)."""
    found = _ASYNC_SEEN.get(policy)
    if found is None:
        found = _ASYNC_SEEN[policy] = any(e.handler.async_ for event in policy.events() for e in policy.entries(event))
    return found


def takes_context(policy: Policy, event: str) -> bool:
    """Whether an ``event`` under ``policy`` delivers its session's pending context."""
    return "additionalContext" in event_spec(event).specific_fields and has_async_handlers(policy)


def parse_items(raw: list[bytes] | bytes) -> list[dict[str, Any]]:
    """The items of a popped list, or of an entry's ``c`` field (a JSON array).

    Raises ``ValueError`` for anything that is not JSON objects.
    """
    items = orjson.loads(raw) if isinstance(raw, bytes) else [orjson.loads(item) for item in raw]
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError("pending context items are not JSON objects")
    return items


def with_context(output: dict[str, Any], event: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """``output`` with the items' ``additionalContext`` and ``systemMessage`` added after its own."""
    contexts = [item["additionalContext"] for item in items if item.get("additionalContext")]
    messages = [item["systemMessage"] for item in items if item.get("systemMessage")]
    if not contexts and not messages:
        return output
    output = dict(output)
    if contexts:
        specific = dict(output.get("hookSpecificOutput") or {"hookEventName": event})
        specific["additionalContext"] = "\n\n".join(filter(None, [specific.get("additionalContext"), *contexts]))
        output["hookSpecificOutput"] = specific
    if messages:
        output["systemMessage"] = "\n".join(filter(None, [output.get("systemMessage"), *messages]))
    return output


__all__ = [
    "APPEND_TAKING_CONTEXT",
    "CONTEXT_BATCH",
    "CONTEXT_TTL_S",
    "MAX_PENDING_CONTEXT",
    "has_async_handlers",
    "parse_items",
    "takes_context",
    "with_context",
]
