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
``{p}async:dead``                         stream      async hook jobs given up: event, handler, attempts
``{p}async:tries:{job_id}``               list        a retried async job's failed attempts (with a TTL)
``{p}dispatchers``                        hash        dispatcher heartbeats (consumer -> ms)
``{p}outcome:{event_id}``                 string      how an event was settled (:mod:`bus.settle`)
``{p}tokens``                             hash        managed tokens: id -> JSON (tenant, name, hash, ...)
``{p}token:{sha256}``                     string      token hash -> token id (the lookup)
``{p}tokens:used``                        hash        token id -> last used (ms)
``{p}policy:version:{id}``                hash        one immutable pushed policy version
``{p}policy:versions:{scope}``            list        version ids of a scope (``org``, ``tenant:T``)
``{p}policy:current``                     hash        scope -> the version id in force
``{p}policy:changed``                     pub/sub     a scope's version changed (nodes reload)
``{p}ratelimit:{kind}:{name}``            hash        a token bucket shared by every gateway
``{p}replay:{run}:...``                   (any)       a policy replay's scratch keys (then deleted)
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
#: Entries kept in the async dead-letter stream (the oldest go first).
ASYNC_DEAD_LETTER_MAXLEN: Final = 100_000


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
    def async_dead_letters(self) -> str:
        """The dead-letter stream of async hook jobs (``hookbus dlq``)."""
        return f"{self.prefix}async:dead"

    def async_attempts(self, job_id: str) -> str:
        """The failed attempts of one retried async job, until it succeeds or is dead-lettered."""
        return f"{self.prefix}async:tries:{job_id}"

    @property
    def dispatchers(self) -> str:
        return f"{self.prefix}dispatchers"

    def reply_channel(self, gateway_id: str) -> str:
        return f"{self.prefix}reply:{gateway_id}"

    @property
    def tokens(self) -> str:
        return f"{self.prefix}tokens"

    def token_lookup(self, token_hash: str) -> str:
        return f"{self.prefix}token:{token_hash}"

    @property
    def tokens_last_used(self) -> str:
        return f"{self.prefix}tokens:used"

    def policy_version(self, version_id: str) -> str:
        return f"{self.prefix}policy:version:{version_id}"

    def policy_versions(self, scope: str) -> str:
        return f"{self.prefix}policy:versions:{scope}"

    @property
    def policy_current(self) -> str:
        return f"{self.prefix}policy:current"

    @property
    def policy_changed(self) -> str:
        return f"{self.prefix}policy:changed"

    def rate_limit(self, kind: str, name: str) -> str:
        return f"{self.prefix}ratelimit:{kind}:{name}"

    def outcome(self, event_id: str) -> str:
        return f"{self.prefix}outcome:{event_id}"

    def once(self, tenant: str, session_id: str, handler_id: str) -> str:
        return f"{self.prefix}once:{tenant}:{session_id}:{handler_id}"

    def stop_guard(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}stopguard:{tenant}:{session_id}"

    def pending_context(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}context:{tenant}:{session_id}"

    def replay_scratch(self, run_id: str) -> Keyspace:
        """A throwaway keyspace for one policy replay (``hookbus policy replay``): its ``once`` markers
        and Stop-guard counts land there, never in the live ones."""
        return Keyspace(f"{self.prefix}replay:{run_id}:")

    @property
    def all_keys_pattern(self) -> str:
        """A SCAN pattern for every key under this prefix (to delete a scratch keyspace)."""
        escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix)
        return f"{escaped}*"


__all__ = ["ASYNC_DEAD_LETTER_MAXLEN", "DEAD_LETTER_MAXLEN", "DEFAULT_PREFIX", "DISPATCH_GROUP", "WORK_STREAM_MAXLEN",
           "Keyspace"]
