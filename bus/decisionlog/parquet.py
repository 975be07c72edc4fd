"""The audit archive's Parquet files: one schema, partitioned by day and tenant, written durably.

Layout (hive style, what DuckDB, Spark, Trino, ClickHouse and Athena read)::

    ROOT/day=2026-12-06/tenant=acme/part-<hash>.parquet

``day`` is the UTC day the gateway received the event; ``tenant`` is percent-encoded (a tenant
``a/b`` is the folder ``tenant=a%2Fb``). Neither is stored in the files: they are the path. Each
file holds the records of one flush for one (day, tenant), zstd-compressed. Nested values (``hooks``,
``shadow``, ``masked``, ``output``, ``input``) are JSON text; fields this schema does not name
(added to records later) are kept as JSON in ``extra``; ``rule`` is the handler that decided.

A file is named after the records in it (a hash of their ``log_id`` and event ``id``), so writing
the same records again (the archiver restarted between writing a file and acknowledging its
records in Redis) writes the same file again, never a second copy. A file is written under a
temporary name (``.part-<hash>.parquet.tmp``), synced, checked and renamed into place, and the
folder is synced; in a local folder no path under the root is followed through a symbolic link.
Any other target is a pyarrow filesystem URI (``s3://bucket/prefix``, ``gs://...``): there the
file is written under its temporary name and moved (:mod:`bus.decisionlog.archivefiles` does
the file work). :meth:`ArchiveTarget.compact` merges a past day's files of a tenant into one.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import hashlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bus.decisionlog.archivefiles import (
    TMP_SUFFIX,
    Written,
    log_ids_local,
    log_ids_remote,
    read_folder,
    remove_files,
    write_local,
    write_remote,
)
from bus.errors import ConfigError

logger = logging.getLogger("hookbus.audit.archive")

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
#: Each column read from the record JSON (the ``r`` field) and its key there (LogRecord.meta's keys).
_FROM_META: Final = (
    ("event", "ev"),
    ("session_id", "sid"),
    ("agent", "ag"),
    ("agent_id", "aid"),
    ("agent_type", "aty"),
    ("tool_name", "tool"),
    ("tool_use_id", "tuid"),
    ("decision", "dec"),
    ("reason", "rsn"),
    ("revision", "rev"),
    ("trace_id", "tid"),
    ("token_id", "tok"),
    ("client_address", "src"),
)
#: The columns of JSON text read from the record JSON, and their keys there.
_JSON_FROM_META: Final = (("hooks", "hooks"), ("shadow", "shadow"), ("masked", "mask"), ("output", "out"))
#: The keys of the record JSON that have columns; any other goes to ``extra``.
_META_KEYS: Final = frozenset(
    {key for _, key in _FROM_META} | {key for _, key in _JSON_FROM_META} | {"id", "outcome", "tn", "ts", "dms"}
)
_FIELDS: Final = frozenset({b"r", b"in", b"o", b"fo"})
_DAY_MS: Final = 86_400_000
_EPOCH_ORDINAL: Final = datetime.date(1970, 1, 1).toordinal()
#: Rows per row group: DuckDB reads row groups in parallel and skips them by their statistics.
ROW_GROUP: Final = 122_880

#: One decision-log entry as the archive takes it: its ``log_id`` and its stream fields.
Entry = tuple[str, Mapping[bytes, bytes]]


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
    """The rows of one (day, tenant) and the entries they came from (``log_id`` and event id)."""

    def __init__(self) -> None:
        #: One tuple per record, in the order of :data:`SCHEMA`'s columns.
        self.records: list[tuple[Any, ...]] = []
        self.keys: list[str] = []
        self._columns: dict[str, list[Any]] | None = None

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
                get("ev") or None,
                get("sid") or None,
                get("ag") or None,
                get("aid") or None,
                get("aty") or None,
                get("tool") or None,
                get("tuid") or None,
                outcome.decode() if outcome else get("outcome"),
                fail_open.decode() if fail_open else None,
                get("dec") or None,
                get("rsn") or None,
                deciding_rule(hooks),
                received_ms,
                decided_ms,
                decided_ms - received_ms,
                get("rev") or None,
                get("tid") or None,
                get("tok") or None,
                get("src") or None,
                _dumped(hooks),
                _dumped(get("shadow")),
                _dumped(get("mask")),
                _dumped(get("out")),
                fields[b"in"].decode("utf-8", "replace"),
                extra,
            )
        )
        self.keys.append(f"{log_id} {event_id}")

    def without(self, keys: set[str]) -> Rows:
        """These rows but those whose key (``"<log_id> <id>"``) is in ``keys``."""
        kept = Rows()
        for record, key in zip(self.records, self.keys, strict=True):
            if key not in keys:
                kept.records.append(record)
                kept.keys.append(key)
        return kept

    @property
    def columns(self) -> dict[str, list[Any]]:
        """The rows column by column (made once, from :attr:`records`)."""
        if self._columns is None:
            transposed = list(zip(*self.records, strict=True)) if self.records else [()] * len(SCHEMA.names)
            self._columns = {name: list(values) for name, values in zip(SCHEMA.names, transposed, strict=True)}
        return self._columns

    def table(self) -> pa.Table:
        if self._columns is not None:
            return pa.table(self._columns, schema=SCHEMA)
        # Column by column straight from the rows (no lists made of them): a column of a
        # hundred thousand values made is a hundred thousand objects the collector walks.
        with _no_cyclic_gc():
            transposed = zip(*self.records, strict=True) if self.records else [()] * len(SCHEMA.names)
            return pa.Table.from_arrays(
                [pa.array(values, type=field.type) for values, field in zip(transposed, SCHEMA, strict=True)],
                schema=SCHEMA,
            )


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


def file_name(rows: Rows | Sequence[str]) -> str:
    """The name of the file holding ``rows`` (or the records of these keys, ``"<log_id> <id>"``):
    the same records, the same name."""
    keys = rows.keys if isinstance(rows, Rows) else rows
    digest = hashlib.sha256("\n".join(keys).encode())
    return f"part-{digest.hexdigest()[:24]}.parquet"


def encode(rows: Rows | pa.Table) -> bytes:
    """One Parquet file of ``rows``, zstd-compressed."""
    sink = pa.BufferOutputStream()
    table = rows.table() if isinstance(rows, Rows) else rows
    pq.write_table(table, sink, compression="zstd", row_group_size=ROW_GROUP, write_statistics=True)
    return bytes(sink.getvalue())


class ArchiveTarget:
    """Where the archive is: a local folder, or a pyarrow filesystem URI."""

    def __init__(self, target: str) -> None:
        if not target.strip():
            raise ConfigError("--to must name a folder or a filesystem URI")
        self.target = target
        self.fs: pafs.FileSystem | None = None
        if "://" in target:
            try:
                fs, path = pafs.FileSystem.from_uri(target)
            except (pa.ArrowException, ValueError) as exc:
                raise ConfigError(f"--to {target}: not a filesystem pyarrow can write ({exc})") from exc
            if isinstance(fs, pafs.LocalFileSystem):
                self.root = path
            else:
                self.fs, self.root = fs, path.rstrip("/")
                return
        else:
            self.root = os.path.abspath(target)
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--to {target}: cannot create the folder ({exc.strerror or exc})") from exc
        if not os.path.isdir(self.root):
            raise ConfigError(f"--to {target}: not a folder")

    @property
    def local(self) -> bool:
        return self.fs is None

    def write(self, parts: Mapping[tuple[str, str], Rows]) -> list[Written]:
        """Put ``parts`` (:func:`rows_by_partition`) in place, one file per (day, tenant); returns the files.

        A file that is there already under its name and whole is kept (these records were
        written before); one that is not whole is written again (and says so). OSError or
        ArchiveError when a file cannot be written whole: what was not renamed into place is
        removed, and nothing else changed.
        """
        written = []
        for (day, tenant), part in sorted(parts.items()):
            folder = partition_dir(day, tenant)
            data = encode(part)
            if self.fs is None:
                written.append(write_local(self.root, folder, file_name(part), data))
            else:
                written.append(write_remote(self.fs, f"{self.root}/{folder}", file_name(part), data))
        return written

    def unwritten(self, parts: Mapping[tuple[str, str], Rows]) -> dict[tuple[str, str], Rows]:
        """``parts`` but the records some file holds already (by ``log_id`` and ``id``), and no empty part.

        For records read again after a restart: the flush that wrote some of them may have held
        others than those read now (read ahead, or read since), so it is not written again
        under the same names; each record is looked up instead. Only files changed since the
        part's oldest record was logged are read, and only those two columns.
        """
        kept = {}
        for (day, tenant), part in parts.items():
            since_ms = min(int(record[0].split("-", 1)[0]) for record in part.records) - 1000 if part.records else 0
            folder = partition_dir(day, tenant)
            if self.fs is None:
                found = log_ids_local(self.root, folder, since_ms)
            else:
                found = log_ids_remote(self.fs, f"{self.root}/{folder}", since_ms)
            rest = part.without(found) if found else part
            if rest.records:
                kept[(day, tenant)] = rest
        return kept

    def compact(self, before_day: str) -> list[Written]:
        """Merge the files of each (day, tenant) folder of a day before ``before_day``
        (``YYYY-MM-DD``) that holds several into one: each record once (by ``log_id`` and
        ``id``), in time order; then remove the others. Local folders only (none elsewhere).

        A year of small files is slow to query (each is opened); one per day and tenant is not.
        A crash after the merged file is in place leaves it beside some of the files it
        merged: the next compaction merges them again into the same file.
        """
        if self.fs is not None:
            return []
        merged = []
        for folder in self._folders_before(before_day):
            names, table = read_folder(self.root, folder)
            if len(names) < 2 or table is None:
                continue
            table = table.sort_by([("received_ms", "ascending"), ("log_id", "ascending")])
            keys = [
                f"{log_id} {i}" for log_id, i in zip(table["log_id"].to_pylist(), table["id"].to_pylist(), strict=True)
            ]
            seen: set[str] = set()
            first = []
            for key in keys:
                first.append(key not in seen)
                seen.add(key)
            table = table.filter(pa.array(first))
            name = file_name([key for key, kept in zip(keys, first, strict=True) if kept])
            merged.append(write_local(self.root, folder, name, encode(table)))
            remove_files(self.root, folder, [other for other in names if other != name])
        return merged

    def _folders_before(self, before_day: str) -> list[str]:
        found: list[str] = []
        with os.scandir(self.root) as days:
            day_dirs = sorted(
                d.name
                for d in days
                if d.name.startswith("day=") and d.name[4:] < before_day and d.is_dir(follow_symlinks=False)
            )
        for day in day_dirs:
            with os.scandir(os.path.join(self.root, day)) as tenants:
                found.extend(
                    f"{day}/{t.name}"
                    for t in sorted(tenants, key=lambda t: t.name)
                    if t.name.startswith("tenant=") and t.is_dir(follow_symlinks=False)
                )
        return found

    def remove_partials(self) -> list[str]:
        """Remove what a crash left under a temporary name (local folders); returns the paths."""
        if self.fs is not None:
            return []
        removed = []
        for folder, _, files in os.walk(self.root, followlinks=False):
            for name in files:
                if name.startswith(".part-") and name.endswith(TMP_SUFFIX):
                    path = os.path.join(folder, name)
                    os.unlink(path)
                    removed.append(path)
        return removed


__all__ = [
    "JSON_COLUMNS",
    "ROW_GROUP",
    "SCHEMA",
    "ArchiveTarget",
    "Entry",
    "Rows",
    "Written",
    "add_entries",
    "day_of",
    "deciding_rule",
    "encode",
    "file_name",
    "partition_dir",
    "rows_by_partition",
]
