"""The dead letters of async hooks: what was given up, why, and every try; listed, replayed, purged.

When the worker gives a job up (:mod:`workers.jobs.delivery`) it appends one entry to the stream
``{p}async:dead`` (capped at about :data:`~bus.redis.keys.ASYNC_DEAD_LETTER_MAXLEN` entries): the
event, masked by the policy's ``hookbus.redact`` exactly as the decision log masks it, the
handler's id and type, why it was given up, and every try with its time and error (errors are
masked too). A retried job keeps its failed tries in ``{p}async:tries:{job_id}`` (a list with a
TTL) until it succeeds or is dead-lettered; either way the list is deleted.

``hookbus dlq`` reads the stream through :func:`scan`, :func:`get`, :func:`replay` and
:func:`purge`. A replay queues a fresh job (``<job id>:r<N>``, tries from 1 again, age from
now) with the same ``webhook-id``, and deletes the entry; if it fails again it comes back as a
new entry. A replay sends the event as stored, that is masked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from arq.connections import ArqRedis

from bus.errors import ProtocolError
from bus.redaction.redact import Masked, Redactor, masked_list
from bus.redis.keys import ASYNC_DEAD_LETTER_MAXLEN, Keyspace
from bus.stream.protocol import Request, iso_time, now_ms, payload_json
from workers.jobs.enqueue import put_job, replay_job_id, replay_number

#: Failed tries kept per job at most (the first ones and the last ones survive a long run).
MAX_ATTEMPTS_KEPT = 100
#: Characters of one try's error kept.
MAX_ERROR_CHARS = 2000
#: How long a retried job's list of tries outlives its ``maxAgeSeconds``, in seconds.
ATTEMPTS_TTL_MARGIN_S = 3600
_PAGE = 500


@dataclasses.dataclass(slots=True)
class Attempt:
    """One failed try of an async job."""

    number: int
    at_ms: int
    outcome: str
    error: str
    retryable: bool
    duration_ms: int = 0
    #: The wait before the next try (0: none followed).
    retry_in_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "try": self.number,
            "at_ms": self.at_ms,
            "outcome": self.outcome,
            "error": self.error,
            "retryable": self.retryable,
            "duration_ms": self.duration_ms,
            "retry_in_ms": self.retry_in_ms,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Attempt:
        return cls(
            int(raw["try"]),
            int(raw["at_ms"]),
            str(raw["outcome"]),
            str(raw["error"]),
            bool(raw["retryable"]),
            int(raw.get("duration_ms", 0)),
            int(raw.get("retry_in_ms", 0)),
        )


def masked_error(redactor: Redactor, text: str | None, masked: Masked | None = None) -> str:
    """An error as it may be stored: secrets masked, at most :data:`MAX_ERROR_CHARS` characters."""
    value, names = redactor.text((text or "")[:MAX_ERROR_CHARS])
    if masked is not None:
        masked.extend((("attempts",), name) for name in names)
    return value


@dataclasses.dataclass(slots=True)
class DeadLetter:
    """One given-up async job, as the stream holds it (``entry_id`` is set when read back)."""

    job_id: str
    event_id: str
    event: str
    tenant: str
    session_id: str
    handler_id: str
    handler_type: str
    why: str
    reason: str
    attempts: list[Attempt]
    payload: bytes
    received_ms: int
    dead_ms: int
    dialect: str = ""
    masked: list[dict[str, str]] = dataclasses.field(default_factory=list)
    entry_id: str = ""
    #: The policy versions the event was evaluated under (a tenant's layer), kept for the replay.
    policy: str = ""

    @property
    def replays(self) -> int:
        """How many times this delivery was replayed before (0: the original job)."""
        return replay_number(self.job_id)

    def encode(self) -> dict[str, bytes]:
        meta = {
            "job": self.job_id,
            "id": self.event_id,
            "ev": self.event,
            "tn": self.tenant,
            "sid": self.session_id,
            "h": self.handler_id,
            "ty": self.handler_type,
            "why": self.why,
            "rsn": self.reason,
            "tries": [a.to_json() for a in self.attempts],
            "ts": self.received_ms,
            "dms": self.dead_ms,
            "dc": self.dialect,
            "mask": self.masked,
            "pv": self.policy,
        }
        return {"m": orjson.dumps(meta), "p": self.payload}

    @classmethod
    def decode(cls, entry_id: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
        try:
            meta = orjson.loads(fields[b"m"])
            return cls(
                job_id=meta["job"],
                event_id=meta["id"],
                event=meta["ev"],
                tenant=meta["tn"],
                session_id=meta["sid"],
                handler_id=meta["h"],
                handler_type=meta["ty"],
                why=meta["why"],
                reason=meta["rsn"],
                attempts=[Attempt.from_json(a) for a in meta["tries"]],
                payload=fields[b"p"],
                received_ms=int(meta["ts"]),
                dead_ms=int(meta["dms"]),
                dialect=meta.get("dc", ""),
                masked=meta.get("mask", []),
                entry_id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
                policy=meta.get("pv", ""),
            )
        except (KeyError, TypeError, ValueError, orjson.JSONDecodeError) as exc:
            raise ProtocolError(f"malformed dead letter {entry_id!r}: {exc!r}") from exc

    def request(self) -> Request:
        """The event to queue again (its stored, masked input)."""
        return Request(
            self.event_id,
            self.event,
            self.tenant,
            self.payload,
            self.received_ms,
            dialect=self.dialect,
            policy=self.policy,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly view (``hookbus dlq show``)."""
        hook_input = payload_json(self.payload)
        return {
            "id": self.entry_id,
            "dead_at": iso_time(self.dead_ms),
            "why": self.why,
            "reason": self.reason,
            "event_id": self.event_id,
            "event": self.event,
            "tenant": self.tenant,
            "session_id": self.session_id,
            "handler": {"id": self.handler_id, "type": self.handler_type},
            "job_id": self.job_id,
            "replays": self.replays,
            "received_at": iso_time(self.received_ms),
            "attempts": [{**a.to_json(), "at": iso_time(a.at_ms)} for a in self.attempts],
            "input": hook_input,
            "masked": self.masked,
        }


def letter_of(
    request: Request,
    hook_input: Any,
    redactor: Redactor,
    *,
    job_id: str,
    handler_id: str,
    handler_type: str,
    why: str,
    attempts: Sequence[Attempt],
) -> DeadLetter:
    """The dead letter of a job, its input and errors masked by ``redactor`` (tries in order, errors already masked)."""
    masked: Masked = []
    payload, parsed = redactor.payload(request.payload, hook_input, ("input",), masked)
    session = parsed.get("session_id") if isinstance(parsed, dict) else None
    kept = list(attempts)
    if len(kept) > MAX_ATTEMPTS_KEPT:
        kept = kept[: MAX_ATTEMPTS_KEPT // 2] + kept[-MAX_ATTEMPTS_KEPT // 2 :]
    return DeadLetter(
        job_id=job_id,
        event_id=request.event_id,
        event=request.event,
        tenant=request.tenant,
        session_id=session if isinstance(session, str) else "",
        handler_id=handler_id,
        handler_type=handler_type,
        why=why,
        reason=kept[-1].error if kept else "",
        attempts=kept,
        payload=payload,
        received_ms=request.received_ms,
        dead_ms=now_ms(),
        dialect=request.dialect,
        masked=masked_list(masked),
        policy=request.policy,
    )


# -- the worker's side ---------------------------------------------------------------------------


async def record_attempt(redis: aioredis.Redis, keys: Keyspace, job_id: str, attempt: Attempt, ttl_s: float) -> None:
    """Keep a failed try of a job that will be retried."""
    key = keys.async_attempts(job_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.rpush(key, orjson.dumps(attempt.to_json()))
        pipe.ltrim(key, -MAX_ATTEMPTS_KEPT, -1)
        pipe.expire(key, int(ttl_s + ATTEMPTS_TTL_MARGIN_S))
        await pipe.execute()


async def earlier_attempts(redis: aioredis.Redis, keys: Keyspace, job_id: str) -> list[Attempt]:
    """The failed tries recorded for a job so far (unreadable ones skipped)."""
    found: list[Attempt] = []
    for raw in await redis.lrange(keys.async_attempts(job_id), 0, -1):  # type: ignore[misc]
        try:
            found.append(Attempt.from_json(orjson.loads(raw)))
        except (KeyError, TypeError, ValueError, orjson.JSONDecodeError):
            continue
    return found


async def forget_attempts(redis: aioredis.Redis, keys: Keyspace, job_id: str) -> None:
    """Drop a job's tries (it succeeded)."""
    await redis.delete(keys.async_attempts(job_id))


async def bury(redis: aioredis.Redis, keys: Keyspace, letter: DeadLetter) -> str:
    """Append ``letter`` to the dead-letter stream and drop its job's tries, in one transaction; the entry id."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(keys.async_dead_letters, letter.encode(), maxlen=ASYNC_DEAD_LETTER_MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.delete(keys.async_attempts(letter.job_id))
        entry_id, _ = await pipe.execute()
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


# -- hookbus dlq ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Filters:
    """Which dead letters a listing, ``replay --all`` or ``purge`` takes: all of them by default."""

    tenants: frozenset[str] = frozenset()
    #: Handler ids (or their start) or handler types.
    handlers: frozenset[str] = frozenset()
    since_ms: int | None = None

    def admits(self, letter: DeadLetter) -> bool:
        if self.tenants and letter.tenant not in self.tenants:
            return False
        return not self.handlers or any(
            letter.handler_type == h or letter.handler_id.startswith(h) for h in self.handlers
        )


async def scan(
    redis: aioredis.Redis, keys: Keyspace, filters: Filters = Filters(), limit: int | None = None
) -> AsyncIterator[DeadLetter]:
    """The dead letters that pass ``filters``, oldest first (malformed entries skipped)."""
    low = f"{filters.since_ms}-0" if filters.since_ms is not None else "-"
    found = 0
    while True:
        page = await redis.xrange(keys.async_dead_letters, min=low, max="+", count=_PAGE)
        for entry_id, fields in page:
            try:
                letter = DeadLetter.decode(entry_id, fields)
            except ProtocolError:
                continue
            if filters.admits(letter):
                yield letter
                found += 1
                if limit is not None and found >= limit:
                    return
        if len(page) < _PAGE:
            return
        last = page[-1][0]
        low = f"({last.decode() if isinstance(last, bytes) else last}"


async def get(redis: aioredis.Redis, keys: Keyspace, entry_id: str) -> DeadLetter | None:
    """One dead letter by its entry id, or None."""
    found = await redis.xrange(keys.async_dead_letters, min=entry_id, max=entry_id, count=1)
    return DeadLetter.decode(*found[0]) if found else None


@dataclasses.dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay did with one dead letter: the new job id, and whether it was queued (False: a job
    with that id was already queued, running or just finished, so the replay is under way already)."""

    letter: DeadLetter
    job_id: str
    queued: bool


async def replay(
    arq: ArqRedis, keys: Keyspace, letters: Iterable[DeadLetter], max_age_s: float = 0.0
) -> list[Replayed]:
    """Queue each letter's delivery again, then delete its entry (it comes back if the replay fails too)."""
    done: list[Replayed] = []
    for letter in letters:
        new_id = replay_job_id(letter.job_id, letter.replays + 1)
        queued = await put_job(arq, keys, letter.request(), letter.handler_id, new_id, max_age_s)
        await arq.xdel(keys.async_dead_letters, letter.entry_id)
        done.append(Replayed(letter, new_id, queued))
    return done


async def purge(redis: aioredis.Redis, keys: Keyspace, entry_ids: Sequence[str] | None = None) -> int:
    """Delete these entries (every one when ``entry_ids`` is None); how many were deleted."""
    if entry_ids is None:
        count = int(await redis.xlen(keys.async_dead_letters))
        await redis.delete(keys.async_dead_letters)
        return count
    deleted = 0
    for start in range(0, len(entry_ids), _PAGE):
        deleted += int(await redis.xdel(keys.async_dead_letters, *entry_ids[start : start + _PAGE]))
    return deleted


async def size(redis: aioredis.Redis, keys: Keyspace) -> int:
    """Entries in the dead-letter stream."""
    return int(await redis.xlen(keys.async_dead_letters))


__all__ = [
    "ATTEMPTS_TTL_MARGIN_S",
    "MAX_ATTEMPTS_KEPT",
    "Attempt",
    "DeadLetter",
    "Filters",
    "Replayed",
    "bury",
    "earlier_attempts",
    "forget_attempts",
    "get",
    "letter_of",
    "masked_error",
    "purge",
    "record_attempt",
    "replay",
    "scan",
    "size",
]
