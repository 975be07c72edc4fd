"""The whole Redis keyspace of hookbus, in one place.

Every key starts with the configurable prefix ``{p}`` (``HOOKBUS_KEY_PREFIX``, default
``hookbus:``), or with ``{P}``, the same prefix as a hash tag (``{hookbus}``). Nothing else
in the code base spells a key.

========================================  ==========  =============================================
key                                       type        what it holds
========================================  ==========  =============================================
``{p}{tN}:stream:blocking``               stream      partition N's blocking events waiting for a decision
``{p}{tN}:stream:events``                 stream      partition N's non-blocking events (audit, async hooks)
``{p}{tN}:stream:dead``                   stream      partition N's entries delivered too often (poison)
``{p}{tN}:decisions``                     stream      partition N's decision log: every event + its decision
``{p}{tN}:outcome:{event_id}``            string      how an event was settled (:mod:`bus.stream.settle`)
``{p}{tN}:chain``                         string      the head of partition N's hash chain of records: ``seq:hash``
``{p}{tN}:decisions:read``                hash        audit group -> records it read of partition N's log (Redis 6.2)
``{p}{tN}:checkpoints``                   stream      partition N's signed chain heads (``audit verify --sign``)
``{p}layout``                             hash        the bus's layout (``partitions``, ``tags``), set by the first node
``{p}reply:{gateway_id}``                 pub/sub     decisions for one gateway process
``{p}{tN}:reply:{gateway_id}``            s-pub/sub   partition N's decisions for one gateway (cluster)
``{p}once:{tenant}:{session}:{handler}``  string      a ``once: true`` handler already ran
``{p}stopguard:{tenant}:{session}``       string      consecutive Stop/SubagentStop blocks
``{p}context:{tenant}:{session}``         list        async hooks' context for the next turn
``{p}{tN}:session:{tenant}:{session}``    hash        a session's state: facts, counters (``hookbus.session``)
``{p}{tN}:sessions:{tenant}``             zset        partition N's sessions of a tenant with state, by last use
``{p}arq:queue``                          zset        the arq queue of async (fire-and-forget) hooks
``{p}async:dead``                         stream      async hook jobs given up: event, handler, attempts
``{p}async:tries:{job_id}``               list        a retried async job's failed attempts (with a TTL)
``{p}dispatchers``                        hash        dispatcher heartbeats (consumer -> ms)
``{P}:tokens``                            hash        managed tokens: id -> JSON (tenant, name, hash, ...)
``{P}:token:{sha256}``                    string      token hash -> token id (the lookup)
``{P}:tokens:used``                       hash        token id -> last used (ms)
``{P}:freezes``                           hash        tenant -> its freeze as JSON (:mod:`bus.freeze`)
``{P}:policy:version:{id}``               hash        one immutable pushed policy version
``{P}:policy:versions:{scope}``           list        version ids of a scope (``org``, ``tenant:T``)
``{P}:policy:current``                    hash        scope -> the version id in force
``{p}policy:changed``                     pub/sub     a scope's version changed (nodes reload)
``{p}ratelimit:{T}:tenant``                hash        tenant T's token bucket, shared by every gateway
``{p}ratelimit:{T}:token:{id}``            hash        a token's bucket (``{T}``: its tenant as a hash tag)
``{p}ratelimit:{T}:session:{session}``     hash        a session's bucket
``{p}fleet:{T}:count:{field}[:{agent}]``   hash        a tenant's (an agent's) windowed counter: bucket -> count
``{p}fleet:{T}:counted:{event_id}``        string      an event already counted by the tenant's counters (TTL)
``{p}{tN}:fleet:pending``                 zset        partition N's settled events still to count in tenant counters
``{p}replay:{run}:...``                   (any)       a policy replay's scratch keys (then deleted)
``{p}approvals:{T}:pending``              zset        tenant T's pending approvals: id -> deadline (ms)
``{p}approvals:{T}:id:{id}``              hash        one approval: the ask, its state, its answer
``{p}approvals:{T}:call:{digest}``        string      a session's tool call -> its approval (retries)
``{p}approvals:{T}:grant:{s}:{rule}``     string      "approve for the session": rule answered in session s
``{p}approvals:tenants``                  set         tenants that have had an approval (the sweeper)
``{p}approvals:answered``                 pub/sub     an approval was answered or expired (``T id``)
``{p}approvals:opened``                   stream      new pending approvals for the webhook (group ``notices``)
========================================  ==========  =============================================

``{session}`` is the session id as it is up to :data:`SESSION_ID_KEY_BYTES` bytes (UTF-8), and
``h:`` + the SHA-256 (hex) of a longer one, or of one that reads like such a digest
(:func:`session_key_part`): an agent's session id never makes a key longer than that.

**Partitions and Redis Cluster slots.** The work streams, the decision log and the outcome
keys are split into ``hookbus.streams.partitions`` partitions (default 1); an event goes to
the partition of its session (:meth:`Keyspace.partition_of`), so one session's events stay
in order. A partition's keys share its hash tag ``{tN}``: on a Redis Cluster they live in one
slot, which the settle script (four keys) and a reader of both streams need. The tags
(:func:`partition_tags`: ``p0`` for one partition; ``p<i>`` or ``p<i>.<k>`` for more) spread
the partitions evenly over the slots, so masters that split the slots evenly hold equally
many partitions; ``{p}layout`` lists them for operators. The control
keys that change together in a transaction (tokens; pushed policy versions) share the tag
``{<prefix>}`` (``{hookbus}:tokens``). Everything else is a single-key operation and spreads
over the cluster by its own name: per-session keys (``once``, Stop guard, context),
heartbeats. A tenant's rate buckets (its own, its tokens', its sessions') share the tag of the
tenant's name, since one script takes from all three. The async queue (arq) does not run on a
cluster: it has its own Redis (``HOOKBUS_QUEUE_REDIS_URL``) there.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import zlib
from collections.abc import Iterable
from typing import Final

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

DEFAULT_PREFIX: Final = "hookbus:"
DISPATCH_GROUP: Final = "dispatchers"

#: Safety caps on the work streams' length. They are queues, not logs: dispatchers trim
#: acknowledged entries within seconds, so the caps only bind when no dispatcher runs.
WORK_STREAM_MAXLEN: Final = 1_000_000
#: Entries kept in the dead-letter stream.
DEAD_LETTER_MAXLEN: Final = 100_000
#: Entries kept in the async dead-letter stream (the oldest go first).
ASYNC_DEAD_LETTER_MAXLEN: Final = 100_000
#: The longest session id (in UTF-8 bytes) a key spells as it is; a longer one by its digest.
SESSION_ID_KEY_BYTES: Final = 128

_DIGEST_FORM = re.compile(r"h:[0-9a-f]{64}")


def session_key_part(session_id: str) -> str:
    """How a key spells ``session_id``: as it is when it is short (up to :data:`SESSION_ID_KEY_BYTES`
    bytes), else ``h:`` + the SHA-256 hex of it, so that an agent cannot make keys as long as it
    likes. A short id that reads like that digest form is hashed too: two ids never share a key."""
    encoded = session_id.encode("utf-8", "surrogatepass")
    if len(encoded) <= SESSION_ID_KEY_BYTES and _DIGEST_FORM.fullmatch(session_id) is None:
        return session_id
    return f"h:{hashlib.sha256(encoded).hexdigest()}"


@dataclasses.dataclass(frozen=True)
class Keyspace:
    """Key names under one prefix."""

    prefix: str = DEFAULT_PREFIX
    #: How many partitions the work streams and the decision log have (``hookbus.streams.partitions``).
    partitions: int = 1

    def with_partitions(self, partitions: int) -> Keyspace:
        """The same keyspace with ``partitions`` partitions."""
        return dataclasses.replace(self, partitions=partitions)

    def partition_of(self, session_id: str) -> int:
        """The partition of a session: every event of one session goes to the same one."""
        if self.partitions <= 1:
            return 0
        return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % self.partitions

    @property
    def all_partitions(self) -> range:
        return range(self.partitions)

    @functools.cached_property
    def _tags(self) -> tuple[str, ...]:
        return partition_tags(self.partitions)

    @functools.cached_property
    def _parts(self) -> tuple[str, ...]:
        """Each partition's key prefix, made once: every key of an event's settle starts so."""
        return tuple(f"{self.prefix}{{{tag}}}:" for tag in self._tags)

    def _part(self, partition: int) -> str:
        return self._parts[partition]

    def blocking_stream(self, partition: int = 0) -> str:
        return f"{self._part(partition)}stream:blocking"

    def events_stream(self, partition: int = 0) -> str:
        return f"{self._part(partition)}stream:events"

    def dead_letter_stream(self, partition: int = 0) -> str:
        return f"{self._part(partition)}stream:dead"

    def decision_log(self, partition: int = 0) -> str:
        return f"{self._part(partition)}decisions"

    def work_streams(self, partitions: Iterable[int]) -> dict[str, int]:
        """The blocking and events streams of ``partitions``, each with its partition."""
        return {stream: p for p in partitions for stream in (self.blocking_stream(p), self.events_stream(p))}

    @property
    def decision_logs(self) -> list[str]:
        """The decision log of every partition (readers merge them by entry id, which is time)."""
        return [self.decision_log(p) for p in self.all_partitions]

    def decision_chain(self, partition: int = 0) -> str:
        """The head of a partition's hash chain of decision-log records (:mod:`bus.decisionlog.chain`)."""
        return f"{self._part(partition)}chain"

    def decision_reads(self, partition: int = 0) -> str:
        """How many records of a partition's log each audit consumer group read, where Redis keeps no
        such counter (6.2: :mod:`bus.decisionlog.readcount`)."""
        return f"{self._part(partition)}decisions:read"

    def chain_checkpoints(self, partition: int = 0) -> str:
        """A partition's signed checkpoints of its hash chain."""
        return f"{self._part(partition)}checkpoints"

    def outcome(self, event_id: str, partition: int = 0) -> str:
        return f"{self._part(partition)}outcome:{event_id}"

    @property
    def layout(self) -> str:
        """The bus's layout (``partitions``), written by the first gateway or dispatcher."""
        return f"{self.prefix}layout"

    @property
    def _control(self) -> str:
        return f"{{{self.prefix.rstrip(':') or 'hookbus'}}}:"

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

    def shard_reply_channel(self, gateway_id: str, partition: int) -> str:
        """A gateway's sharded Pub/Sub channel for one partition's replies (on a Redis Cluster)."""
        return f"{self._part(partition)}reply:{gateway_id}"

    @property
    def tokens(self) -> str:
        return f"{self._control}tokens"

    def token_lookup(self, token_hash: str) -> str:
        return f"{self._control}token:{token_hash}"

    @property
    def tokens_last_used(self) -> str:
        return f"{self._control}tokens:used"

    @property
    def freezes(self) -> str:
        """Every tenant's freeze (:mod:`bus.freeze.store`)."""
        return f"{self._control}freezes"

    def policy_version(self, version_id: str) -> str:
        return f"{self._control}policy:version:{version_id}"

    def policy_versions(self, scope: str) -> str:
        return f"{self._control}policy:versions:{scope}"

    @property
    def policy_current(self) -> str:
        return f"{self._control}policy:current"

    @property
    def policy_changed(self) -> str:
        return f"{self.prefix}policy:changed"

    def rate_limit(self, tenant: str, scope: str, name: str = "") -> str:
        """A token bucket of ``tenant``: its own (``scope`` ``tenant``), a token's or a session's (``name``)."""
        base = f"{self.prefix}ratelimit:{{{tenant}}}:{scope}"
        if scope == "session":
            return f"{base}:{session_key_part(name)}"
        return f"{base}:{name}" if name else base

    def once(self, tenant: str, session_id: str, handler_id: str) -> str:
        return f"{self.prefix}once:{tenant}:{session_key_part(session_id)}:{handler_id}"

    def stop_guard(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}stopguard:{tenant}:{session_key_part(session_id)}"

    def session_state(self, tenant: str, session_id: str, partition: int = 0) -> str:
        """A session's state (:mod:`bus.session`): in its partition's slot, which settles its events."""
        return f"{self._part(partition)}session:{tenant}:{session_key_part(session_id)}"

    def session_index(self, tenant: str, partition: int = 0) -> str:
        """The sessions of ``tenant`` with state in a partition, scored by last use (the cap evicts)."""
        return f"{self._part(partition)}sessions:{tenant}"

    def fleet_counter(self, tenant: str, field: str, agent: str = "") -> str:
        """A tenant's windowed counter (``agent``: one agent's), in the tenant's own slot."""
        base = f"{self.prefix}fleet:{{{tenant}}}:count:{field}"
        return f"{base}:{agent}" if agent else base

    def fleet_counted(self, tenant: str, event_id: str) -> str:
        """Set once an event is counted by its tenant's counters: a redelivery is not counted again."""
        return f"{self.prefix}fleet:{{{tenant}}}:counted:{event_id}"

    def fleet_pending(self, partition: int = 0) -> str:
        """A partition's settled events not yet counted in their tenant's counters, by settle time
        (written by the settle, removed once counted: :mod:`workers.dispatcher.fleet`)."""
        return f"{self._part(partition)}fleet:pending"

    def pending_context(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}context:{tenant}:{session_key_part(session_id)}"

    def _approvals(self, tenant: str) -> str:
        # One hash tag per tenant: the scripts that open and answer an approval touch its keys together.
        return f"{self.prefix}approvals:{{{tenant}}}:"

    def approvals_pending(self, tenant: str) -> str:
        return f"{self._approvals(tenant)}pending"

    def approval(self, tenant: str, approval_id: str) -> str:
        return f"{self._approvals(tenant)}id:{approval_id}"

    def approval_call(self, tenant: str, digest: str) -> str:
        return f"{self._approvals(tenant)}call:{digest}"

    def approval_grant(self, tenant: str, session_id: str, rule: str) -> str:
        return f"{self._approvals(tenant)}grant:{session_key_part(session_id)}:{rule}"

    @property
    def approval_tenants(self) -> str:
        return f"{self.prefix}approvals:tenants"

    @property
    def approvals_opened(self) -> str:
        return f"{self.prefix}approvals:opened"

    @property
    def approvals_answered(self) -> str:
        return f"{self.prefix}approvals:answered"

    def replay_scratch(self, run_id: str) -> Keyspace:
        """A throwaway keyspace for one policy replay (``hookbus policy replay``): its ``once`` markers
        and Stop-guard counts land there, never in the live ones."""
        return Keyspace(f"{self.prefix}replay:{run_id}:")

    @property
    def all_keys_pattern(self) -> str:
        """A SCAN pattern for every key under this prefix (to delete a scratch keyspace)."""
        escaped = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix)
        return f"{escaped}*"


@functools.lru_cache(maxsize=64)
def partition_tags(partitions: int) -> tuple[str, ...]:
    """The hash tag of each partition, chosen so that partition ``i``'s slot lies in the ``i``-th
    of ``partitions`` equal slot ranges: masters that split the slots evenly (as
    ``redis-cli --cluster create`` does) hold equally many partitions when their number divides
    the partitions'. ``p<i>`` where its slot already lies inside its range, else ``p<i>.<k>`` for
    the first ``k`` whose slot lies in the range's middle half."""
    tags = []
    for index in range(partitions):
        low = index * REDIS_CLUSTER_HASH_SLOTS // partitions
        high = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // partitions
        tag = f"p{index}"
        if not low < key_slot(tag.encode()) < high - 1:
            quarter = (high - low) // 4
            inner = range(low + quarter, high - quarter)
            tag = next(t for t in (f"p{index}.{k}" for k in range(1, 1 << 20)) if key_slot(t.encode()) in inner)
        tags.append(tag)
    return tuple(tags)


__all__ = [
    "ASYNC_DEAD_LETTER_MAXLEN",
    "DEAD_LETTER_MAXLEN",
    "DEFAULT_PREFIX",
    "DISPATCH_GROUP",
    "SESSION_ID_KEY_BYTES",
    "WORK_STREAM_MAXLEN",
    "Keyspace",
    "partition_tags",
    "session_key_part",
]
