"""The whole Redis keyspace of hookbus, in one place.

Every key starts with the configurable prefix (``HOOKBUS_KEY_PREFIX``, default
``hookbus:``). Nothing else in the code base spells a key.

========================================  ==========  =============================================
key                                       type        what it holds
========================================  ==========  =============================================
``{p}stream:blocking``                    stream      blocking events waiting for a decision
``{p}stream:events``                      stream      non-blocking events (audit, async hooks)
``{p}stream:dead``                        stream      entries delivered too often (poison)
``{p}decisions``                          stream      the decision log: every event + its decision
``{p}reply:{gateway_id}``                 pub/sub     decisions for one gateway process
``{p}once:{tenant}:{session}:{handler}``  string      a ``once: true`` handler already ran
``{p}stopguard:{tenant}:{session}``       string      consecutive Stop/SubagentStop blocks
``{p}context:{tenant}:{session}``         list        async hooks' context for the next turn
``{p}arq:queue``                          zset        the arq queue of async (fire-and-forget) hooks
``{p}dispatchers``                        hash        dispatcher heartbeats (consumer -> ms)
``{p}outcome:{event_id}``                 string      how an event was settled (:mod:`bus.settle`)
========================================  ==========  =============================================
"""

from __future__ import annotations

import dataclasses
from typing import Final

DEFAULT_PREFIX: Final = "hookbus:"
DISPATCH_GROUP: Final = "dispatchers"

#: Safety caps on the work streams' length. They are queues, not logs: dispatchers trim
#: acknowledged entries within seconds, so the caps only bind when no dispatcher runs.
WORK_STREAM_MAXLEN: Final = 1_000_000
#: Entries kept in the dead-letter stream.
DEAD_LETTER_MAXLEN: Final = 100_000


@dataclasses.dataclass(frozen=True)
class Keyspace:
    """Key names under one prefix."""

    prefix: str = DEFAULT_PREFIX

    @property
    def blocking_stream(self) -> str:
        return f"{self.prefix}stream:blocking"

    @property
    def events_stream(self) -> str:
        return f"{self.prefix}stream:events"

    @property
    def dead_letter_stream(self) -> str:
        return f"{self.prefix}stream:dead"

    @property
    def decision_log(self) -> str:
        return f"{self.prefix}decisions"

    @property
    def arq_queue(self) -> str:
        return f"{self.prefix}arq:queue"

    @property
    def dispatchers(self) -> str:
        return f"{self.prefix}dispatchers"

    def reply_channel(self, gateway_id: str) -> str:
        return f"{self.prefix}reply:{gateway_id}"

    def outcome(self, event_id: str) -> str:
        return f"{self.prefix}outcome:{event_id}"

    def once(self, tenant: str, session_id: str, handler_id: str) -> str:
        return f"{self.prefix}once:{tenant}:{session_id}:{handler_id}"

    def stop_guard(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}stopguard:{tenant}:{session_id}"

    def pending_context(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}context:{tenant}:{session_id}"


__all__ = ["DEAD_LETTER_MAXLEN", "DEFAULT_PREFIX", "DISPATCH_GROUP", "WORK_STREAM_MAXLEN", "Keyspace"]
