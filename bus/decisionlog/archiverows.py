"""The audit archive's schema, and the rows of decision-log records made fit for it.

Each record becomes one row of :data:`SCHEMA`: the record JSON's (``r``) values in columns of
their own, nested values as JSON text, the hook input as the agent sent it, any other key or
stream field in ``extra`` as JSON, ``rule`` the handler that decided. A read of entries alike is
made column by column (:func:`add_read`, :mod:`bus.decisionlog.archivebatch`); any other entry
row by row (:func:`add_entries`). :class:`Rows` holds the rows of one (day, tenant).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from bus.decisionlog.archivebatch import FROM_META, JSON_FROM_META, Unlike, columns, split

logger = logging.getLogger("hookbus.audit.archive")

#: One decision-log entry as the archive takes it: its ``log_id`` and its stream fields.
Entry = tuple[str, Mapping[bytes, bytes]]

_TEXT = pa.string()
_COUNT = pa.int64()
#: Every column of an archive file, in order (``day`` and ``tenant`` are the path).
SCHEMA: Final = pa.schema(
    [
        ("log_id", _TEXT),
        ("id", _TEXT),
        ("time", pa.timestamp("ms", tz="UTC")),
        ("event", _TEXT),
        ("session_id", _TEXT),
        ("agent", _TEXT),
        ("agent_id", _TEXT),
        ("agent_type", _TEXT),
        ("tool_name", _TEXT),
        ("tool_use_id", _TEXT),
        ("outcome", _TEXT),
        ("fail_open", _TEXT),
        ("decision", _TEXT),
        ("reason", _TEXT),
        ("rule", _TEXT),
        ("received_ms", _COUNT),
        ("decided_ms", _COUNT),
        ("latency_ms", _COUNT),
        ("revision", _TEXT),
        ("trace_id", _TEXT),
        ("token_id", _TEXT),
        ("client_address", _TEXT),
        ("hooks", _TEXT),
        ("shadow", _TEXT),
        ("masked", _TEXT),
        ("output", _TEXT),
        ("input", _TEXT),
        ("extra", _TEXT),
    ]
)
#: The columns whose values are JSON text.
JSON_COLUMNS: Final = frozenset({"hooks", "shadow", "masked", "output", "input", "extra"})
#: The keys of the record JSON that have columns; any other goes to ``extra``.
_META_KEYS: Final = frozenset(
    {key for _, key in FROM_META} | {key for _, key in JSON_FROM_META} | {"id", "outcome", "tn", "ts", "dms"}
)
_FIELDS: Final = frozenset({b"r", b"in", b"o", b"fo"})
_DAY_MS: Final = 86_400_000
_EPOCH_ORDINAL: Final = datetime.date(1970, 1, 1).toordinal()
#: Rows per row group: DuckDB reads row groups in parallel and skips them by their statistics.
ROW_GROUP: Final = 122_880


def day_of(ms: int) -> str:
    """The UTC day of an epoch-milliseconds time, ``YYYY-MM-DD``."""
    return datetime.date.fromordinal(_EPOCH_ORDINAL + ms // _DAY_MS).isoformat()


def deciding_rule(hooks: Any) -> str | None:
    """The id of the handler whose answer made the decision (several: comma-separated)."""
    if not isinstance(hooks, list):
        return None
    ids = [str(hook.get("id")) for hook in hooks if isinstance(hook, dict) and hook.get("decided")]
    return ",".join(ids) or None


def partition_dir(day: str, tenant: str) -> str:
    """The folder of one (day, tenant), relative to the root."""
    return f"day={day}/tenant={quote(tenant, safe='')}"


def _dumped(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


class Rows:
    """The rows of one (day, tenant), in the order added: tables made column by column
    (:func:`add_read`) and rows made one by one (:meth:`add`)."""

    def __init__(self, table: pa.Table | None = None) -> None:
        self._tables: list[pa.Table] = [] if table is None else [table]
        #: Rows made one by one since the last table, one tuple each in the order of :data:`SCHEMA`'s columns.
        self.records: list[tuple[Any, ...]] = []
        self._keys: list[str] | None = None

    def __len__(self) -> int:
        return sum(int(table.num_rows) for table in self._tables) + len(self.records)

    def append(self, table: pa.Table) -> None:
        """Add rows made column by column (in :data:`SCHEMA`)."""
        self._settle()
        self._tables.append(table)
        self._keys = None

    def add(self, log_id: str, fields: Mapping[bytes, bytes], meta: dict[str, Any]) -> None:
        get = meta.get
        event_id = str(meta["id"])
        received_ms, decided_ms = int(meta["ts"]), int(meta["dms"])
        # The settle script rewrites the outcome in its own field (o) as in the JSON; o wins.
        outcome, fail_open = fields.get(b"o"), fields.get(b"fo")
        extra = None
        if not _META_KEYS.issuperset(meta) or not _FIELDS.issuperset(fields):
            kept = {key: meta[key] for key in sorted(meta.keys() - _META_KEYS)}
            for field in sorted(fields.keys() - _FIELDS):
                kept[field.decode("utf-8", "replace")] = fields[field].decode("utf-8", "replace")
            extra = orjson.dumps(kept).decode()
        hooks = get("hooks")
        self.records.append(
            (
                log_id,
                event_id,
                received_ms,
                *[get(key) or None for key in ("ev", "sid", "ag", "aid", "aty", "tool", "tuid")],
                outcome.decode() if outcome else get("outcome"),
                fail_open.decode() if fail_open else None,
                get("dec") or None,
                get("rsn") or None,
                deciding_rule(hooks),
                received_ms,
                decided_ms,
                decided_ms - received_ms,
                *[get(key) or None for key in ("rev", "tid", "tok", "src")],
                _dumped(hooks),
                _dumped(get("shadow")),
                _dumped(get("mask")),
                _dumped(get("out")),
                fields[b"in"].decode("utf-8", "replace"),
                extra,
            )
        )
        self._keys = None

    def _settle(self) -> None:
        """The rows made one by one, as a table."""
        if self.records:
            with _no_cyclic_gc():
                transposed = zip(*self.records, strict=True)
                arrays = [pa.array(values, type=field.type) for values, field in zip(transposed, SCHEMA, strict=True)]
            self._tables.append(pa.Table.from_arrays(arrays, schema=SCHEMA))
            self.records = []

    @property
    def keys(self) -> list[str]:
        """Each row's ``"<log_id> <id>"``, in order."""
        if self._keys is None:
            self._keys = _keys(self.table()).to_pylist()
        return self._keys

    def without(self, keys: set[str]) -> Rows:
        """These rows but those whose key (``"<log_id> <id>"``) is in ``keys``."""
        table = self.table()
        return Rows(table.filter(pc.invert(pc.is_in(_keys(table), value_set=pa.array(list(keys), pa.string())))))

    def table(self) -> pa.Table:
        self._settle()
        if len(self._tables) != 1:
            self._tables = [pa.concat_tables(self._tables) if self._tables else SCHEMA.empty_table()]
        return self._tables[0]


def _keys(table: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(table["log_id"], table["id"], " ")


def rows_by_partition(entries: Iterable[Entry]) -> tuple[dict[tuple[str, str], Rows], list[str]]:
    """The rows of each (day, tenant), in the order given, and the ``log_id`` of the entries
    that are not decision-log records (skipped)."""
    parts: dict[tuple[str, str], Rows] = {}
    return parts, add_entries(parts, entries)


def add_entries(parts: dict[tuple[str, str], Rows], entries: Iterable[Entry]) -> list[str]:
    """Add the rows of ``entries`` to those of their (day, tenant) in ``parts``; returns the
    ``log_id`` of the entries that are not decision-log records (skipped)."""
    skipped: list[str] = []
    # The parsed records are dicts kept until their row is made: the cyclic collector would
    # walk every one of a batch again and again, and they hold no cycles.
    with _no_cyclic_gc():
        for log_id, fields in entries:
            _add(parts, skipped, log_id, fields)
    return skipped


def add_read(
    parts: dict[tuple[str, str], Rows], log_ids: Sequence[bytes], pairs: Sequence[Sequence[bytes]]
) -> list[str]:
    """:func:`add_entries` for one read's entries, each ``[name, value, name, value...]`` (none
    empty): made column by column (:mod:`bus.decisionlog.archivebatch`), or one by one when they
    are not all alike."""
    try:
        made = columns(log_ids, pairs, _META_KEYS)
    except Unlike as exc:
        logger.debug("%d records made one by one: %s", len(pairs), exc)
        return add_entries(
            parts, [(i.decode(), dict(zip(p[::2], p[1::2], strict=True))) for i, p in zip(log_ids, pairs, strict=True)]
        )
    for key, table in split(made, SCHEMA).items():
        rows = parts.get(key)
        if rows is None:
            rows = parts[key] = Rows()
        rows.append(table)
    return []


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector paused: a batch allocates many objects and frees none (no cycles)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _add(parts: dict[tuple[str, str], Rows], skipped: list[str], log_id: str, fields: Mapping[bytes, bytes]) -> None:
    try:
        meta = orjson.loads(fields[b"r"])
        key = (day_of(int(meta["ts"])), str(meta["tn"]))
        if not isinstance(fields[b"in"], bytes):
            raise TypeError("no hook input")
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError):
        skipped.append(log_id)
        return
    rows = parts.get(key)
    if rows is None:
        rows = parts[key] = Rows()
    rows.add(log_id, fields, meta)


__all__ = [
    "JSON_COLUMNS",
    "ROW_GROUP",
    "SCHEMA",
    "Entry",
    "Rows",
    "add_entries",
    "add_read",
    "day_of",
    "deciding_rule",
    "partition_dir",
    "rows_by_partition",
]
