"""Tamper evidence: each decision-log record is a link of its partition's hash chain.

Each partition's log is one chain, whose head is ``{p}{tN}:chain`` (``seq:hash``, in the
partition's slot). The script that writes a record (:data:`bus.stream.settle.SETTLE`, or
:data:`~bus.stream.settle.APPEND_RECORD` for a record the gateway writes) links it in the same
atomic step as it appends it: the record's ``ch`` field is ``partition:seq:previous hash:hash``
and the head moves to it. So a record re-delivered, or answered first and settled later, is
linked once, as it is written once, and concurrent dispatchers never fork a chain.

A record's hash is SHA-1 over the previous record's hash, the partition, the sequence number,
the record's digest, and the outcome and fail-open reason the script settled on (the only parts
it decides; :func:`link_hash`). The digest (:func:`view_digest`) is the SHA-256 of the record as
readers see it (:meth:`~bus.stream.protocol.LogRecord.to_json`: its keys sorted, empty values
left out, without its log id, outcome, fail-open reason and link), computed by the writer
before the script runs. So the chain can be checked from the live log and from a JSON Lines
export alike, and a field that later versions add does not change older records' digests.
Redis's Lua has SHA-1 only; the previous hash comes first in what it hashes, so a collision
prepared in advance (the known attack on SHA-1) cannot be placed in a chain.

:class:`ChainCheck` reads records in log order and names the first one altered (its content no
longer matches its hash, or its hash is not the one the next record holds), deleted (a gap in
the sequence numbers, or records missing after the last one the chain's head names) or
reordered (a record after one that follows it).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, Final

import orjson

from bus.stream.protocol import LogRecord, iso_time, payload_json
from bus.stream.settle import CHAIN_GENESIS

#: What a record's digest leaves out: what only the log knows (its id), what the settle script
#: settles (outcome, fail-open reason: they enter the hash of their own) and the link itself.
_NOT_DIGESTED: Final = frozenset({"log_id", "outcome", "fail_open", "chain"})
_NUMBERS: Final[tuple[type, ...]] = (int, float, bool)


def view_digest(view: Mapping[str, Any]) -> str:
    """The SHA-256 (hex) of a record's JSON view (:meth:`LogRecord.to_json`, or a line of ``hookbus
    audit export``) as its chain covers it."""
    kept = {
        key: value for key, value in view.items() if key not in _NOT_DIGESTED and (value or type(value) in _NUMBERS)
    }
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).hexdigest()


def record_digest(record: LogRecord) -> str:
    """:func:`view_digest` of ``record`` (what its writer passes to the script that links it).

    The same bytes hashed as ``view_digest(record.to_json())`` without building that view: each
    field :meth:`LogRecord.to_json` shows and the digest keeps, kept as ``view_digest`` keeps it
    (a field the view shows as ``x or None`` only when ``x`` is true). A field added to the view
    must be added here too (the tests compare both on records with every field set)."""
    kept: dict[str, Any] = {}  # one test per field, no loop: this runs once per record written
    value: Any
    if (value := record.agent) or type(value) in _NUMBERS:
        kept["agent"] = value
    if record.agent_id:
        kept["agent_id"] = record.agent_id
    if record.agent_type:
        kept["agent_type"] = record.agent_type
    if record.approval:
        kept["approval"] = record.approval
    if record.budgets:
        kept["budgets"] = record.budgets
    if record.client_address:
        kept["client_address"] = record.client_address
    if (value := record.decided_ms) or type(value) in _NUMBERS:
        kept["decided_ms"] = value
    if (value := record.decision) or type(value) in _NUMBERS:
        kept["decision"] = value
    if (value := record.event) or type(value) in _NUMBERS:
        kept["event"] = value
    if (value := record.facts) or type(value) in _NUMBERS:
        kept["facts"] = value
    if (value := record.hooks) or type(value) in _NUMBERS:
        kept["hooks"] = value
    if (value := record.event_id) or type(value) in _NUMBERS:
        kept["id"] = value
    if (value := payload_json(record.payload)) or type(value) in _NUMBERS:
        kept["input"] = value
    if (value := record.latency_ms) or type(value) in _NUMBERS:
        kept["latency_ms"] = value
    if (value := record.masked) or type(value) in _NUMBERS:
        kept["masked"] = value
    if (value := record.output) or type(value) in _NUMBERS:
        kept["output"] = value
    if record.reason:
        kept["reason"] = record.reason
    if (value := record.received_ms) or type(value) in _NUMBERS:
        kept["received_ms"] = value
    if (value := record.revision) or type(value) in _NUMBERS:
        kept["revision"] = value
    if (value := record.session_id) or type(value) in _NUMBERS:
        kept["session_id"] = value
    if (value := record.shadow) or type(value) in _NUMBERS:
        kept["shadow"] = value
    if (value := record.tenant) or type(value) in _NUMBERS:
        kept["tenant"] = value
    kept["time"] = iso_time(record.received_ms)
    if record.token_id:
        kept["token_id"] = record.token_id
    if record.tool_name:
        kept["tool_name"] = record.tool_name
    if record.tool_use_id:
        kept["tool_use_id"] = record.tool_use_id
    if record.trace_id:
        kept["trace_id"] = record.trace_id
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).hexdigest()


def link_hash(prev: str, partition: int, seq: int, digest: str, outcome: str, reason: str) -> str:
    """A record's hash, as the script that links it computes it (``redis.sha1hex``)."""
    body = f"{prev}\n{partition}\n{seq}\n{digest}\n{outcome}\n{reason}".encode()
    return hashlib.sha1(body, usedforsecurity=False).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """A record's place in its chain (its ``ch`` field)."""

    partition: int
    seq: int
    prev: str
    hash: str

    @classmethod
    def parse(cls, text: Any) -> Link | None:
        """The link ``partition:seq:prev:hash``, or None when ``text`` is not one."""
        if not isinstance(text, str):
            return None
        parts = text.split(":")
        if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        return cls(int(parts[0]), int(parts[1]), parts[2], parts[3])


@dataclasses.dataclass(frozen=True, slots=True)
class Break:
    """The first place a chain does not hold."""

    #: ``altered``, ``deleted`` or ``reordered``.
    kind: str
    #: Where: the record's log id (or a line number), its event id, partition and sequence number.
    where: str
    event_id: str
    partition: int | None
    seq: int | None
    detail: str

    def __str__(self) -> str:
        place = f"partition {self.partition}, seq {self.seq}" if self.partition is not None else "no link"
        return f"record {self.where} (event {self.event_id or '?'}, {place}) {self.kind}: {self.detail}"


@dataclasses.dataclass(slots=True)
class _Gap:
    """Sequence numbers ``first..last`` missing before the record at ``position``."""

    first: int
    last: int
    position: int
    found: Break


@dataclasses.dataclass(slots=True)
class _Partition:
    last: Link
    last_where: str
    last_event: str
    first_seq: int
    gaps: list[_Gap] = dataclasses.field(default_factory=list)


class ChainCheck:
    """Checks records fed in log order (each partition's in its own order) and keeps the first break."""

    def __init__(self) -> None:
        self._partitions: dict[int, _Partition] = {}
        self._breaks: list[tuple[int, Break]] = []
        self._expected: dict[tuple[int, int], tuple[str, str]] = {}
        #: Records checked, and records before any link (written before records were chained).
        self.checked = 0
        self.unlinked = 0

    @property
    def partitions(self) -> Mapping[int, tuple[int, int]]:
        """Each partition's first and last sequence number seen."""
        return {p: (state.first_seq, state.last.seq) for p, state in self._partitions.items()}

    def expect(self, partition: int, seq: int, digest: str, source: str) -> None:
        """The record ``seq`` of ``partition``, if read, must have the hash ``digest`` (``source``, a
        signed checkpoint, says so)."""
        self._expected[(partition, seq)] = (digest, source)

    def add(self, where: str, view: Mapping[str, Any]) -> None:
        """Check one record's JSON view (``where``: its log id or line)."""
        position, event_id = self.checked, str(view.get("id") or "")
        self.checked += 1
        link = Link.parse(view.get("chain"))
        if link is None:
            if self._partitions:
                self._break(position, "altered", where, event_id, None, None, "it has no link after linked records")
            else:
                self.unlinked += 1
            return
        digest = view_digest(view)
        expected = link_hash(
            link.prev, link.partition, link.seq, digest, view.get("outcome") or "", view.get("fail_open") or ""
        )
        if expected != link.hash:
            self._break(
                position, "altered", where, event_id, link.partition, link.seq, "its content does not match its hash"
            )
        signed, source = self._expected.get((link.partition, link.seq), (link.hash, ""))
        if signed != link.hash:
            self._break(
                position,
                "altered",
                where,
                event_id,
                link.partition,
                link.seq,
                f"its hash is not the one {source} signed",
            )
        state = self._partitions.get(link.partition)
        if state is None:
            self._partitions[link.partition] = _Partition(link, where, event_id, link.seq)
            return
        if link.seq <= state.last.seq:
            detail = f"it comes after seq {state.last.seq} (record {state.last_where})"
            for gap in state.gaps:
                if gap.first <= link.seq <= gap.last:
                    self._resolve(state, gap, link.seq)
                    break
            self._break(position, "reordered", where, event_id, link.partition, link.seq, detail)
            return
        if link.seq > state.last.seq + 1:
            missing = f"seq {state.last.seq + 1}" + (f" to {link.seq - 1}" if link.seq - 1 > state.last.seq + 1 else "")
            found = Break(
                "deleted", where, event_id, link.partition, link.seq, f"the records before it are missing ({missing})"
            )
            state.gaps.append(_Gap(state.last.seq + 1, link.seq - 1, position, found))
        elif link.prev != state.last.hash:
            detail = f"its hash is not the one the next record ({where}) holds"
            self._break(
                position - 1, "altered", state.last_where, state.last_event, link.partition, state.last.seq, detail
            )
        state.last, state.last_where, state.last_event = link, where, event_id

    def unreadable(self, where: str, detail: str) -> None:
        """Something read where a record (or a checkpoint) should be is not one: altered."""
        self._break(self.checked, "altered", where, "", None, None, detail)
        self.checked += 1

    def check_head(self, partition: int, head: tuple[int, str], source: str = "the chain's head") -> None:
        """Compare the last record seen of ``partition`` with its chain's head (``seq``, ``hash``) read
        before the records, or a checkpoint (``source``): records missing at the end are deleted too."""
        seq, digest = head
        state = self._partitions.get(partition)
        last_seq = state.last.seq if state is not None else 0
        if last_seq < seq:
            where = state.last_where if state is not None else "(none)"
            detail = f"{source} names seq {seq}, the log ends at seq {last_seq} (record {where})"
            self._breaks.append((self.checked, Break("deleted", "(end)", "", partition, seq, detail)))
        elif state is not None and last_seq == seq and state.last.hash != digest:
            detail = f"its hash is not the one {source} holds"
            self._breaks.append(
                (self.checked, Break("altered", state.last_where, state.last_event, partition, seq, detail))
            )

    def first_break(self) -> Break | None:
        """The first break in reading order, once every record was added."""
        found = list(self._breaks)
        found += [(gap.position, gap.found) for state in self._partitions.values() for gap in state.gaps]
        return min(found, key=lambda item: item[0])[1] if found else None

    def _resolve(self, state: _Partition, gap: _Gap, seq: int) -> None:
        state.gaps.remove(gap)
        if gap.first < seq:
            state.gaps.append(_Gap(gap.first, seq - 1, gap.position, gap.found))
        if seq < gap.last:
            state.gaps.append(_Gap(seq + 1, gap.last, gap.position, gap.found))

    def _break(
        self, position: int, kind: str, where: str, event_id: str, partition: int | None, seq: int | None, detail: str
    ) -> None:
        self._breaks.append((position, Break(kind, where, event_id, partition, seq, detail)))


__all__ = ["CHAIN_GENESIS", "Break", "ChainCheck", "Link", "link_hash", "record_digest", "view_digest"]
