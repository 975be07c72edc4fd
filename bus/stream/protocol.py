"""The stream protocol between gateways and dispatchers.

A gateway appends each event to a stream: blocking events to ``stream:blocking`` with the
reply channel of the gateway process and an absolute deadline, non-blocking events to
``stream:events``. Dispatchers read both through one consumer group, run the policy and,
for blocking events, PUBLISH a :class:`Reply` on the gateway's channel, sealed with a MAC of
the shared reply key (:mod:`bus.runtime.replykey`); one reader per gateway process resolves all
of its waiting requests with the replies that verify. Every event, with its decision, is
then appended to the decision log.

Entries are flat maps of short ASCII keys to bytes; the hook input travels as the exact
JSON bytes the agent sent.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

import orjson

from bus.errors import ProtocolError
from bus.hooks.decisions import Decision
from bus.rules.limits import json_depth_over

logger = logging.getLogger("hookbus")

#: The sender of an entry that names none (written before entries named their sender).
_NO_SENDER: Final = ("", "")

#: A stream entry as written: short ASCII field names to values.
StreamFields = dict[str, bytes | str | int]

#: The agent a record names when its event came in Claude Code's own format (no dialect), as
#: every record written before records named their agent did.
CLAUDE_CODE: Final = "claude"


#: The deepest value a view shows as JSON: every writer of views (orjson stops at 254) can write it.
VIEW_DEPTH: Final = 200


def payload_json(payload: bytes) -> Any:
    """A stored hook input as JSON, or as text when it is not JSON or nested too deep to write
    again (for views, never decisions: a reader goes on past such a record, and says so)."""
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode("utf-8", "replace")
    if json_depth_over(payload, value, VIEW_DEPTH) is not None:
        logger.warning("a stored hook input is nested over %s deep: it is shown as text", VIEW_DEPTH)
        return payload.decode("utf-8", "replace")
    return value


def now_ms() -> int:
    return time.time_ns() // 1_000_000


#: A second's text, made once for the records of that second (they come in time order).
_iso_second = functools.lru_cache(maxsize=4)(lambda second: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))


def iso_time(ms: int) -> str:
    """``ms`` (milliseconds since the epoch) as ISO 8601 UTC with milliseconds: ``2025-01-07T09:30:00.123Z``."""
    return f"{_iso_second(ms // 1000)}.{ms % 1000:03d}Z"


@dataclasses.dataclass(slots=True)
class Request:
    """One event on its way from a gateway to a dispatcher."""

    event_id: str
    event: str
    tenant: str
    payload: bytes
    received_ms: int
    deadline_ms: int = 0
    reply_to: str = ""
    dialect: str = ""
    #: Set when the gateway already answered fail-open: Redis was down when it arrived, or at its
    #: deadline's claim (the entry is then sent a second time, with the reason).
    fail_open: str = ""
    #: The policy versions the gateway chose (``org|tenant``, :mod:`bus.policy.registry`).
    policy: str = ""
    #: The session's pending context the gateway took when it appended the event (a JSON array,
    #: :mod:`bus.stream.pending_context`); None when it took none (the dispatcher looks itself).
    context: bytes | None = None
    #: The W3C ``traceparent`` of the gateway's span for this event (``t``; "" when not traced).
    trace: str = ""
    #: Who sent the event: the id of the caller's token (never the token; "" with no tokens
    #: configured) and the address of the client that connected to the gateway.
    token_id: str = ""
    client_address: str = ""
    #: Set by the dispatcher that records this event's spans (never written): its evaluation and
    #: handlers add theirs (one attribute read for the others).
    traced: bool = dataclasses.field(default=False, compare=False, repr=False)
    #: The hook input once :meth:`hook_input` has parsed it (never written): every later stage
    #: (the engine, the handlers, the record, the settle) reads this one object.
    parsed: dict[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    def hook_input(self) -> dict[str, Any]:
        """The hook input, parsed on the first call only; :class:`ValueError` when the payload is
        not JSON (``orjson.JSONDecodeError`` is one) or not an object."""
        if self.parsed is None:
            value = orjson.loads(self.payload)
            if not isinstance(value, dict):
                raise ValueError("hook input is not a JSON object")
            self.parsed = value
        return self.parsed

    @property
    def blocking(self) -> bool:
        return bool(self.reply_to)

    @property
    def agent(self) -> str:
        """The agent that sent the event: its dialect's name, ``claude`` for Claude Code's own format."""
        return self.dialect or CLAUDE_CODE

    def expired(self, at_ms: int | None = None) -> bool:
        return self.blocking and (now_ms() if at_ms is None else at_ms) >= self.deadline_ms

    def remaining_s(self) -> float:
        return max(0.0, (self.deadline_ms - now_ms()) / 1000) if self.blocking else float("inf")

    def meta(self) -> bytes:
        """The metadata of the stream entry (``m``): one JSON array. A reply's MAC covers it and
        the hook input (:mod:`bus.runtime.replykey`), as the gateway wrote them. The sender
        (token id, client address) comes last, when known: an entry without it decodes the same."""
        meta = [
            self.event_id,
            self.event,
            self.tenant,
            self.received_ms,
            self.reply_to,
            self.deadline_ms,
            self.dialect,
            self.fail_open,
            self.policy,
        ]
        if self.token_id or self.client_address:
            meta += [self.token_id, self.client_address]
        return orjson.dumps(meta)

    def encode(self) -> StreamFields:
        """The stream entry: the metadata as one JSON array (``m``) and the hook input (``p``): two
        fields, not one per value, since redis-py packs every argument of a command on its own
        (that packing was the larger part of the gateway's cost per append)."""
        if self.trace:  # a field of its own: entries without it (untraced, older) decode the same
            return {"m": self.meta(), "p": self.payload, "t": self.trace}
        return {"m": self.meta(), "p": self.payload}

    def named_fields(self) -> StreamFields:
        """The entry with one field per value (older gateways' form; still arq jobs' and dead letters')."""
        fields: StreamFields = {
            "id": self.event_id,
            "ev": self.event,
            "tn": self.tenant,
            "ts": self.received_ms,
            "p": self.payload,
        }
        if self.reply_to:
            fields["rp"] = self.reply_to
            fields["dl"] = self.deadline_ms
        if self.dialect:
            fields["dc"] = self.dialect
        if self.fail_open:
            fields["fo"] = self.fail_open
        if self.policy:
            fields["pv"] = self.policy
        if self.trace:
            fields["tp"] = self.trace
        return fields

    def to_job(self) -> dict[str, str | int]:
        """:meth:`named_fields` as JSON-safe values (for arq jobs)."""
        fields = self.named_fields()
        return {key: value.decode() if isinstance(value, bytes) else value for key, value in fields.items()}

    @classmethod
    def from_job(cls, data: Mapping[str, Any]) -> Request:
        """Inverse of :meth:`to_job`."""
        return cls.decode({key.encode(): str(value).encode() for key, value in data.items()})

    @classmethod
    def decode(cls, fields: Mapping[bytes, bytes]) -> Request:
        """A request from its stream entry (:meth:`encode`, or :meth:`named_fields`)."""
        meta = fields.get(b"m")
        if meta is None:
            return cls._decode_named(fields)
        try:
            event_id, event, tenant, received_ms, reply_to, deadline_ms, dialect, fail_open, policy, *sender = (
                orjson.loads(meta)
            )
            token_id, client_address = sender or _NO_SENDER
            payload, trace = fields[b"p"], fields.get(b"t")
            # By position: this runs once per event a dispatcher reads.
            request = cls(
                event_id, event, tenant, payload, received_ms, deadline_ms, reply_to, dialect, fail_open, policy
            )
            request.context, request.token_id, request.client_address = fields.get(b"c"), token_id, client_address
            if trace is not None:
                request.trace = trace.decode("latin-1")
        except (KeyError, ValueError, TypeError) as exc:  # orjson.JSONDecodeError is a ValueError
            raise ProtocolError(f"malformed stream entry: {exc!r}") from exc
        # One chained comparison for the texts (each type is str), no generator.
        texts = type(event_id) is type(event) is type(tenant) is type(reply_to) is type(dialect) is str
        texts = texts and type(fail_open) is type(policy) is type(token_id) is type(client_address) is str
        if not texts or type(received_ms) is not int or type(deadline_ms) is not int:
            raise ProtocolError(f"malformed stream entry: unexpected types in {meta[:200]!r}")
        return request

    @classmethod
    def _decode_named(cls, fields: Mapping[bytes, bytes]) -> Request:
        try:
            return cls(
                event_id=fields[b"id"].decode(),
                event=fields[b"ev"].decode(),
                tenant=fields[b"tn"].decode(),
                payload=fields[b"p"],
                received_ms=int(fields[b"ts"]),
                deadline_ms=int(fields.get(b"dl", b"0")),
                reply_to=fields.get(b"rp", b"").decode(),
                dialect=fields.get(b"dc", b"").decode(),
                fail_open=fields.get(b"fo", b"").decode(),
                policy=fields.get(b"pv", b"").decode(),
                trace=fields.get(b"tp", b"").decode(),
            )
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"malformed stream entry: {exc!r}") from exc


@dataclasses.dataclass(slots=True)
class Reply:
    """A dispatcher's answer to one blocking request (sent sealed with its MAC, :mod:`bus.runtime.replykey`)."""

    event_id: str
    output: dict[str, Any]
    decision: str = Decision.NONE
    #: Why the answer is a fail-open one (``hook_error``, ``hook_timeout``, ``dispatcher_error``), if it is.
    fail_open: str | None = None
    #: ``(handler type, duration in seconds, outcome)`` for every handler that ran.
    hooks: list[tuple[str, float, str]] = dataclasses.field(default_factory=list)
    #: An ``ask`` for the central approval queue: ``{"rule", "reason"}`` (:mod:`bus.approvals`).
    approval: dict[str, str] | None = None

    def encode(self) -> bytes:
        raw = {"id": self.event_id, "out": self.output, "dec": self.decision, "fo": self.fail_open, "h": self.hooks}
        if self.approval is not None:
            raw["apv"] = self.approval
        return orjson.dumps(raw)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> Reply:
        try:
            return cls._from_raw(orjson.loads(data))
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(f"malformed reply: {exc!r}") from exc

    @classmethod
    def _from_raw(cls, raw: Any) -> Reply:
        try:
            if type(raw["id"]) is not str:
                raise TypeError("the event id is not a string")
            return cls(
                event_id=raw["id"],
                output=raw["out"],
                decision=raw.get("dec", Decision.NONE),
                fail_open=raw.get("fo"),
                hooks=[tuple(h) for h in raw.get("h", [])],
                approval=raw.get("apv"),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ProtocolError(f"malformed reply: {exc!r}") from exc


@dataclasses.dataclass(slots=True)
class LogRecord:
    """One entry of the decision log (the audit trail)."""

    event_id: str
    event: str
    tenant: str
    session_id: str
    #: A :class:`~bus.hooks.decisions.RecordOutcome`.
    outcome: str
    #: A :class:`~bus.hooks.decisions.Decision`.
    decision: str
    output: dict[str, Any]
    payload: bytes
    received_ms: int
    decided_ms: int
    revision: str = ""
    hooks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    shadow: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tool_name: str = ""
    #: Why the agent got no decision, if it did not (a :class:`~bus.hooks.decisions.FailOpenReason`), else "".
    fail_open: str = ""
    #: The subagent that sent the event (``agent_id`` / ``agent_type`` of the hook input), if any.
    agent_id: str = ""
    agent_type: str = ""
    tool_use_id: str = ""
    #: Why the decision was made (a deny or block reason), if one was given.
    reason: str = ""
    #: What :mod:`bus.redaction.redact` masked: ``{"pointer": "/input/...", "detector": "github"}`` (never the value).
    masked: list[dict[str, str]] = dataclasses.field(default_factory=list)
    #: The agent that sent the event: the dialect it came in (``gemini``, ``codex``, ``sdk`` ...),
    #: ``claude`` for Claude Code's own format (:attr:`Request.agent`).
    agent: str = CLAUDE_CODE
    #: The OpenTelemetry trace of the event (32 hex digits), when it was traced and exported.
    trace_id: str = ""
    #: Who sent the event: its token's id (never the token) and the client's address (:class:`Request`).
    token_id: str = ""
    client_address: str = ""
    #: How a person answered the event's ``ask`` (:mod:`bus.approvals`): who, when, the wait, the outcome.
    approval: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Its link in its partition's hash chain (``ch``, ``partition:seq:prev:hash``): :mod:`bus.decisionlog.chain`.
    chain: str = ""
    facts: list[str] = dataclasses.field(default_factory=list)  # the session's facts once it settled, by name
    budgets: dict[str, float] = dataclasses.field(default_factory=dict)  # each session budget's units left, by name

    def meta(self) -> bytes:
        """The record as JSON, without the hook input (the ``r`` field). Its outcome comes first
        (``{"outcome":"decided",...``): the settle script rewrites it there when it settles the
        event otherwise (fail-open past the deadline), so that ``r`` and ``o`` always agree."""
        meta: dict[str, Any] = {
            "outcome": self.outcome,
            "id": self.event_id,
            "ev": self.event,
            "tn": self.tenant,
            "sid": self.session_id,
            "ag": self.agent,
            "tool": self.tool_name,
            "dec": self.decision,
            "out": self.output,
            "ts": self.received_ms,
            "dms": self.decided_ms,
            "rev": self.revision,
            "hooks": self.hooks,
            "shadow": self.shadow,
        }
        for key, value in (
            ("aid", self.agent_id),
            ("aty", self.agent_type),
            ("tuid", self.tool_use_id),
            ("rsn", self.reason),
            ("mask", self.masked),
            ("tid", self.trace_id),
            ("tok", self.token_id),
            ("src", self.client_address),
            ("apv", self.approval),
            ("facts", self.facts),
            ("bud", self.budgets),
        ):
            if value:  # absent when empty: records stay small, and older readers ignore them
                meta[key] = value
        return orjson.dumps(meta)

    def encode(self) -> StreamFields:
        """The record as JSON, the hook input exactly as the agent sent it, the outcome and the fail-open
        reason (the outcome, here and in the JSON, and the reason are settled by :mod:`bus.stream.settle`)."""
        return {"r": self.meta(), "in": self.payload, "o": self.outcome, "fo": self.fail_open}

    @classmethod
    def decode(cls, fields: Mapping[bytes, bytes]) -> LogRecord:
        try:
            meta = orjson.loads(fields[b"r"])
            return cls(
                event_id=meta["id"],
                event=meta["ev"],
                tenant=meta["tn"],
                session_id=meta["sid"],
                agent=str(meta.get("ag") or CLAUDE_CODE),
                tool_name=meta.get("tool", ""),
                outcome=fields.get(b"o", b"").decode() or meta["outcome"],
                fail_open=fields.get(b"fo", b"").decode(),
                decision=meta["dec"],
                output=meta["out"],
                payload=fields[b"in"],
                received_ms=int(meta["ts"]),
                decided_ms=int(meta["dms"]),
                revision=meta.get("rev", ""),
                hooks=meta.get("hooks", []),
                shadow=meta.get("shadow", []),
                agent_id=meta.get("aid", ""),
                agent_type=meta.get("aty", ""),
                tool_use_id=meta.get("tuid", ""),
                reason=meta.get("rsn", ""),
                masked=meta.get("mask", []),
                trace_id=meta.get("tid", ""),
                token_id=meta.get("tok", ""),
                client_address=meta.get("src", ""),
                approval=meta.get("apv", {}),
                chain=fields.get(b"ch", b"").decode(),
                facts=meta.get("facts", []),
                budgets=meta.get("bud", {}),
            )
        except (KeyError, ValueError, TypeError, orjson.JSONDecodeError) as exc:
            raise ProtocolError(f"malformed decision-log entry: {exc!r}") from exc

    @property
    def latency_ms(self) -> int:
        """From the gateway receiving the event to the dispatcher deciding it."""
        return self.decided_ms - self.received_ms

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly view (for ``hookbus tail`` and exports)."""
        hook_input = payload_json(self.payload)
        return {
            "id": self.event_id,
            "time": iso_time(self.received_ms),
            "event": self.event,
            "tenant": self.tenant,
            "session_id": self.session_id,
            "agent": self.agent,
            "agent_id": self.agent_id or None,
            "agent_type": self.agent_type or None,
            "tool_name": self.tool_name or None,
            "tool_use_id": self.tool_use_id or None,
            "outcome": self.outcome,
            "fail_open": self.fail_open or None,
            "decision": self.decision,
            "reason": self.reason or None,
            "output": self.output,
            "input": hook_input,
            "received_ms": self.received_ms,
            "decided_ms": self.decided_ms,
            "latency_ms": self.latency_ms,
            "revision": self.revision,
            "hooks": self.hooks,
            "shadow": self.shadow,
            "masked": self.masked,
            "trace_id": self.trace_id or None,
            "token_id": self.token_id or None,
            "client_address": self.client_address or None,
            **({"approval": self.approval} if self.approval else {}),
            "chain": self.chain or None,
            "facts": self.facts,
            **({"budgets": self.budgets} if self.budgets else {}),
        }


__all__ = ["CLAUDE_CODE", "LogRecord", "Reply", "Request", "StreamFields", "iso_time", "now_ms", "payload_json"]
