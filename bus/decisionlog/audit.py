"""Reading the decision log as an audit trail: time windows, filters, consumer groups, state.

The log is a Redis stream whose entry ids start with the millisecond Redis wrote the record
(when the event was settled), so a time window is an ``XRANGE`` between two ids, read in
pages with exclusive starts: each record once, in order, however long the window, while new
records keep arriving. What readers get is what the dispatchers wrote, masked already
(:mod:`bus.redaction.redact`). ``hookbus audit export``, ``hookbus audit follow`` and
``GET /v1/audit/events`` are built on this module.

With several partitions (``hookbus.streams.partitions``) the log is one stream per partition;
a window is then every partition's range, merged by entry id (:mod:`bus.decisionlog.reader`), and an
``after`` cursor (an entry id) resumes every partition just past it. Two partitions may hold
the same id (written in the same millisecond): merged, they come in partition order, and a
page (``limit``) never ends between them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import re
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any, Final, Protocol

import orjson
import redis.asyncio as aioredis

from bus.decisionlog.reader import read_merged
from bus.errors import ProtocolError, TimeError
from bus.redis.entries import entry_ms
from bus.redis.keys import Keyspace
from bus.runtime.settings import comma_list
from bus.stream.protocol import LogRecord, now_ms

#: Entries per ``XRANGE`` page.
PAGE: Final = 500
#: The largest sequence number of a stream id (the end of a millisecond).
MAX_SEQ: Final = 18446744073709551615
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)$")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
#: The latest time a window may name: the end of the year 9999, in epoch milliseconds.
MAX_TIME_MS: Final = 253_402_300_799_999


def parse_time(text: str, now: int | None = None) -> int:
    """A point in time as epoch milliseconds: ``now``; ``90s``, ``15m``, ``1h``, ``7d``, ``2w`` ago;
    epoch seconds or milliseconds; or ISO 8601 (``2025-01-07T09:30:00Z``; without a zone, local time).

    :class:`TimeError` for text that is none of these, or a time before 1970 or after the year 9999."""
    now = now_ms() if now is None else now
    value = text.strip()
    if value == "now":
        return now
    if found := _RELATIVE.match(value):
        return _in_range(text, now - int(float(found[1]) * _UNIT_MS[found[2]]))
    if value.isdigit():
        number = int(value)
        return _in_range(text, number if number >= 100_000_000_000 else number * 1000)
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise TimeError(
            f"cannot read the time {text!r}: use now, 15m, 2h, 7d, epoch seconds or ISO 8601 (2025-01-07T09:30:00Z)"
        ) from None
    try:
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()
        stamp = int(parsed.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):  # a date the platform's clock cannot place (year 1, year 9999)
        raise _out_of_range(text) from None
    return _in_range(text, stamp)


def _out_of_range(text: str) -> TimeError:
    return TimeError(f"the time {text[:64]!r} is out of range: give one from 1970 to the year 9999")


def _in_range(text: str, ms: int) -> int:
    if not 0 <= ms <= MAX_TIME_MS:
        raise _out_of_range(text)
    return ms


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """``[since_ms, until_ms]`` (both inclusive; None: open) of record write times."""

    since_ms: int | None = None
    until_ms: int | None = None

    @classmethod
    def parse(cls, since: str | None, until: str | None, now: int | None = None) -> Window:
        now = now_ms() if now is None else now
        window = cls(parse_time(since, now) if since else None, parse_time(until, now) if until else None)
        if window.since_ms is not None and window.until_ms is not None and window.since_ms > window.until_ms:
            raise TimeError("the window ends before it starts (since is after until)")
        return window

    @property
    def low(self) -> str:
        return "-" if self.since_ms is None else f"{max(0, self.since_ms)}-0"

    @property
    def high(self) -> str:
        return "+" if self.until_ms is None else f"{max(0, self.until_ms)}-{MAX_SEQ}"


class Filterable(Protocol):
    """What a filter reads of a record: a :class:`LogRecord`, or a reader's view of one."""

    @property
    def tenant(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def event(self) -> str: ...
    @property
    def decision(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def tool_name(self) -> str: ...
    @property
    def agent(self) -> str: ...


@dataclasses.dataclass(frozen=True, slots=True)
class RecordFilter:
    """Which decision-log records pass, the same for every reader (``hookbus tail``, ``hookbus
    audit export``, the gateway's export and stream): every non-empty set must match (sessions
    by prefix; ``decisions`` also matches an outcome such as ``fail-open``; ``agents`` are
    dialect names, ``claude`` for Claude Code, in any case). ``scope`` is a tenant no filter can
    leave."""

    tenants: frozenset[str] = frozenset()
    sessions: frozenset[str] = frozenset()
    events: frozenset[str] = frozenset()
    decisions: frozenset[str] = frozenset()
    tools: frozenset[str] = frozenset()
    agents: frozenset[str] = frozenset()
    scope: str | None = None

    @classmethod
    def of(cls, scope: str | None = None, **given: Iterable[str] | None) -> RecordFilter:
        """From repeated / comma-separated values (``tenants=``, ``sessions=``, ``events=``,
        ``decisions=``, ``tools=``, ``agents=``; ``None`` for one not given)."""
        sets = {name: frozenset(comma_list(values)) for name, values in given.items()}
        if "agents" in sets:  # dialect names are case-insensitive where agents name them (?dialect=)
            sets["agents"] = frozenset(agent.lower() for agent in sets["agents"])
        return cls(scope=scope, **sets)

    def entry_filter(self) -> Callable[[Any], bool] | None:
        """A test of a raw log entry's fields, before it is decoded: False only for a record of a
        tenant this filter cannot pass (None when every tenant may pass).

        The tenant is the ``tn`` key of the entry's ``r`` field, which hookbus writes with orjson
        (``"tn":"acme"``): an entry whose ``r`` holds ``"tn":"`` but not one of the allowed
        tenants so written is another tenant's. Anything else (an entry written some other way,
        or no ``r`` at all) passes, to be decoded and filtered as before.
        """
        if self.scope is None and not self.tenants:
            return None
        allowed = ({self.scope} & self.tenants if self.tenants else {self.scope}) if self.scope else self.tenants
        needles = tuple(b'"tn":' + orjson.dumps(tenant) for tenant in sorted(allowed))

        def may_pass(fields: Any) -> bool:
            raw = fields.get(b"r") if isinstance(fields, Mapping) else None
            if not isinstance(raw, bytes):
                return True
            return any(needle in raw for needle in needles) or b'"tn":"' not in raw

        return may_pass

    def matches(self, record: Filterable) -> bool:
        return (
            (self.scope is None or record.tenant == self.scope)
            and (not self.tenants or record.tenant in self.tenants)
            and (not self.sessions or any(record.session_id.startswith(s) for s in self.sessions))
            and (not self.events or record.event in self.events)
            and (not self.decisions or record.decision in self.decisions or record.outcome in self.decisions)
            and (not self.tools or record.tool_name in self.tools)
            and (not self.agents or record.agent in self.agents)
        )


#: Entries a window's read decodes between two turns of the event loop: a scan of the whole
#: log runs on the loop that answers ``POST /v1/hooks``, and must not hold it for long.
YIELD_EVERY: Final = 20


@dataclasses.dataclass(slots=True)
class Scan:
    """How far one :func:`read_window` got: what a reader bounded by ``examine`` resumes from."""

    #: Log entries read (every tenant's, decoded or not).
    examined: int = 0
    #: The id of the last entry read.
    last_id: str | None = None
    #: Set when ``examine`` stopped the read before the end of the window: resume ``after`` :attr:`last_id`.
    cut: bool = False


async def read_window(
    redis: aioredis.Redis,
    keys: Keyspace,
    window: Window,
    passes: RecordFilter | None = None,
    *,
    page: int = PAGE,
    after: str | None = None,
    limit: int | None = None,
    examine: int | None = None,
    scan: Scan | None = None,
) -> AsyncGenerator[tuple[str, LogRecord], None]:
    """``(entry id, record)`` of every record in ``window`` that ``passes``, oldest first, each once.

    Every partition's log is read in ``XRANGE`` pages starting just after the last id read
    from it, and the pages are merged by id: records written while the window is read appear
    once if they fall in it, never twice. ``after`` resumes after an entry id (in every
    partition). Entries that are not decision-log records are skipped; so are, before they are
    decoded, records of tenants ``passes`` cannot pass (:meth:`RecordFilter.entry_filter`).

    ``limit`` stops after that many records, and the records that have the same entry id as
    the last one (other partitions'): a page never ends between two of them, so resuming
    ``after`` its last id skips nothing.

    ``examine`` stops after reading that many entries, matching or not (and those with the
    same id as the last one, as for ``limit``), and sets ``scan.cut``: resuming ``after``
    ``scan.last_id`` skips nothing. ``scan`` (given) counts what was read.
    """
    scan = Scan() if scan is None else scan
    low = f"({after}" if after else window.low
    may_pass = passes.entry_filter() if passes is not None else None
    sent, last = 0, b""
    async for entry in read_merged(redis, keys.decision_logs, low=low, high=window.high, page=page):
        if limit is not None and sent >= limit and entry.entry_id != last:
            return
        if examine is not None and scan.examined >= examine and entry.log_id != scan.last_id:
            scan.cut = True
            return
        scan.examined, scan.last_id = scan.examined + 1, entry.log_id
        if scan.examined % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a long scan shares the loop with the decisions it serves too
        if may_pass is not None and not may_pass(entry.fields):
            continue
        try:
            record = LogRecord.decode(entry.fields)
        except ProtocolError:
            continue
        if passes is None or passes.matches(record):
            yield entry.log_id, record
            sent, last = sent + 1, entry.entry_id


@dataclasses.dataclass(frozen=True, slots=True)
class GroupState:
    """One consumer group on the decision log."""

    name: str
    #: Records delivered to the group and not acknowledged yet.
    pending: int
    #: Records not acknowledged yet: pending ones, plus those not delivered (on Redis < 7 the
    #: undelivered ones are counted up to :data:`LAG_COUNT_LIMIT`).
    lag: int
    #: Age of the oldest record the group has not acknowledged (0 when it has them all).
    lag_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class LogState:
    """The decision log's size and age, and its consumer groups."""

    length: int
    #: Age of the oldest record kept, in seconds (0 for an empty log).
    age_s: float
    groups: tuple[GroupState, ...]


#: How many undelivered records a Redis < 7 (no ``lag`` in XINFO GROUPS) counts per group.
LAG_COUNT_LIMIT: Final = 1000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def log_state(redis: aioredis.Redis, keys: Keyspace, now: int | None = None) -> LogState:
    """Read :class:`LogState` over every partition's log (a few round trips; a missing log reads as empty).

    Lengths add up and the age is the oldest record's. A consumer group has one group of its
    name on each partition's log (:mod:`hookbus.audit.command`): their counts add up, their lag in
    seconds is the largest.
    """
    now = now_ms() if now is None else now
    logs = keys.decision_logs
    async with redis.pipeline(transaction=False) as pipe:
        for log in logs:
            pipe.xlen(log)
            pipe.xrange(log, count=1)
            pipe.xinfo_groups(log)
        answers = await pipe.execute(raise_on_error=False)
    length, oldest_ms = 0, None
    by_name: dict[str, list[GroupState]] = {}
    for index, log in enumerate(logs):
        count, oldest, groups = answers[3 * index : 3 * index + 3]
        if isinstance(count, Exception) or isinstance(oldest, Exception):
            raise count if isinstance(count, Exception) else oldest
        length += int(count)
        if oldest:
            oldest_ms = min(entry_ms(oldest[0][0]), oldest_ms if oldest_ms is not None else now)
        if isinstance(groups, Exception):  # no stream yet
            continue
        for group in groups:
            if isinstance(group, Mapping):
                state = await _group_state(redis, log, group, now)
                by_name.setdefault(state.name, []).append(state)
    states = tuple(
        GroupState(name, sum(s.pending for s in parts), sum(s.lag for s in parts), max(s.lag_s for s in parts))
        for name, parts in by_name.items()
    )
    age_s = max(0.0, (now - oldest_ms) / 1000) if oldest_ms is not None else 0.0
    return LogState(length, age_s, states)


async def _group_state(redis: aioredis.Redis, log: str, group: Mapping[Any, Any], now: int) -> GroupState:
    name = _text(group.get("name", ""))
    pending = int(group.get("pending") or 0)
    last = _text(group.get("last-delivered-id") or "0-0")
    first_undelivered = await redis.xrange(log, min=f"({last}", max="+", count=1)
    if group.get("lag") is not None:
        undelivered = int(group["lag"])
    elif not first_undelivered:
        undelivered = 0
    else:
        undelivered = len(await redis.xrange(log, min=f"({last}", max="+", count=LAG_COUNT_LIMIT))
    oldest_ms: int | None = None
    if pending:
        summary = await redis.xpending(log, name)
        if summary.get("min"):
            oldest_ms = entry_ms(summary["min"])
    if oldest_ms is None and first_undelivered:
        oldest_ms = entry_ms(first_undelivered[0][0])
    lag_s = max(0.0, (now - oldest_ms) / 1000) if oldest_ms is not None else 0.0
    return GroupState(name, pending, pending + undelivered, lag_s)


__all__ = [
    "LAG_COUNT_LIMIT",
    "MAX_TIME_MS",
    "PAGE",
    "Filterable",
    "GroupState",
    "LogState",
    "RecordFilter",
    "Scan",
    "Window",
    "log_state",
    "parse_time",
    "read_window",
]
