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
file is written under its temporary name and moved.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import logging
import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bus.errors import ArchiveError, ConfigError

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
_JSON_FROM_META: Final = (("hooks", "hooks"), ("shadow", "shadow"), ("masked", "mask"), ("output", "out"))
_META_KEYS: Final = frozenset(
    {key for _, key in _FROM_META} | {key for _, key in _JSON_FROM_META} | {"id", "outcome", "tn", "ts", "dms"}
)
_FIELDS: Final = frozenset({b"r", b"in", b"o", b"fo"})
_DAY_MS: Final = 86_400_000
_EPOCH_ORDINAL: Final = datetime.date(1970, 1, 1).toordinal()
#: Rows per row group: DuckDB reads row groups in parallel and skips them by their statistics.
ROW_GROUP: Final = 122_880
TMP_SUFFIX: Final = ".tmp"

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


class Rows:
    """The rows of one (day, tenant), column by column, and the entries they came from."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
        self.keys: list[str] = []

    def add(self, log_id: str, fields: Mapping[bytes, bytes], meta: dict[str, Any]) -> None:
        columns = self.columns
        get = meta.get
        columns["log_id"].append(log_id)
        columns["id"].append(str(meta["id"]))
        for name, key in _FROM_META:
            columns[name].append(get(key) or None)
        for name, key in _JSON_FROM_META:
            value = get(key)
            columns[name].append(None if value is None else orjson.dumps(value).decode())
        received_ms, decided_ms = int(meta["ts"]), int(meta["dms"])
        columns["time"].append(received_ms)
        columns["received_ms"].append(received_ms)
        columns["decided_ms"].append(decided_ms)
        columns["latency_ms"].append(decided_ms - received_ms)
        # The settle script rewrites the outcome in its own field (o) as in the JSON; o wins.
        outcome, fail_open = fields.get(b"o"), fields.get(b"fo")
        columns["outcome"].append(outcome.decode() if outcome else get("outcome"))
        columns["fail_open"].append(fail_open.decode() if fail_open else None)
        columns["rule"].append(deciding_rule(get("hooks")))
        columns["input"].append(fields[b"in"].decode("utf-8", "replace"))
        other_meta, other_fields = meta.keys() - _META_KEYS, fields.keys() - _FIELDS
        if other_meta or other_fields:
            extra = {key: meta[key] for key in sorted(other_meta)}
            for field in sorted(other_fields):
                extra[field.decode("utf-8", "replace")] = fields[field].decode("utf-8", "replace")
            columns["extra"].append(orjson.dumps(extra).decode())
        else:
            columns["extra"].append(None)
        self.keys.append(f"{log_id} {meta['id']}")

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=SCHEMA)


def rows_by_partition(entries: Iterable[Entry]) -> tuple[dict[tuple[str, str], Rows], list[str]]:
    """The rows of each (day, tenant), in the order given, and the ``log_id`` of the entries
    that are not decision-log records (skipped)."""
    parts: dict[tuple[str, str], Rows] = {}
    skipped: list[str] = []
    # A batch allocates a few dicts per record and keeps them: the cyclic collector would walk
    # them all again and again (half the time of a batch), and they hold no cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for log_id, fields in entries:
            _add(parts, skipped, log_id, fields)
    finally:
        if collecting:
            gc.enable()
    return parts, skipped


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


def file_name(rows: Rows) -> str:
    """The name of the file holding ``rows``: the same records (``log_id`` and event id), the same name."""
    digest = hashlib.sha256("\n".join(rows.keys).encode())
    return f"part-{digest.hexdigest()[:24]}.parquet"


def encode(rows: Rows) -> bytes:
    """One Parquet file of ``rows``, zstd-compressed."""
    sink = pa.BufferOutputStream()
    pq.write_table(rows.table(), sink, compression="zstd", row_group_size=ROW_GROUP, write_statistics=True)
    return bytes(sink.getvalue())


def rows_in(data: bytes | pa.NativeFile) -> int:
    """The rows of a whole Parquet file; ArchiveError when it is not one (cut short, corrupt)."""
    try:
        return int(pq.ParquetFile(pa.BufferReader(data) if isinstance(data, bytes) else data).metadata.num_rows)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ArchiveError(f"not a whole Parquet file ({exc})") from exc


@dataclass(frozen=True, slots=True)
class Written:
    """One file a write put in place (or found there already, whole)."""

    path: str
    rows: int
    size: int
    replaced: bool = False


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
                written.append(_write_local(self.root, folder, file_name(part), data))
            else:
                written.append(_write_remote(self.fs, f"{self.root}/{folder}", file_name(part), data))
        return written

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


def _open_dir(root_fd: int, folder: str) -> int:
    """A descriptor of ``folder`` under ``root_fd``, made where missing, no component a symbolic link."""
    fd = os.dup(root_fd)
    try:
        for name in folder.split("/"):
            try:
                os.mkdir(name, 0o750, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise ArchiveError(f"{name} in {folder} is not a folder (a symbolic link is refused): {exc}") from exc
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _existing_rows(dir_fd: int, name: str) -> int | None:
    """The rows of the whole Parquet file ``name`` (None: missing, or not whole)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        try:
            return rows_in(file.read())
        except ArchiveError:
            return None


def _write_local(root: str, folder: str, name: str, data: bytes) -> Written:
    path = os.path.join(root, folder, name)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dir_fd = _open_dir(root_fd, folder)
    finally:
        os.close(root_fd)
    try:
        replaced = False
        if (rows := _existing_rows(dir_fd, name)) is not None:
            return Written(path, rows, len(data))
        if os.path.lexists(path):
            logger.warning("%s is not a whole Parquet file (cut short or corrupt): writing it again", path)
            replaced = True
        tmp = f".{name}{TMP_SUFFIX}"
        _unlink(tmp, dir_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            check = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            with os.fdopen(check, "rb") as file:  # what the disk holds, not what was meant
                rows = rows_in(file.read())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            _unlink(tmp, dir_fd)
            raise
        os.fsync(dir_fd)
        return Written(path, rows, len(data), replaced)
    finally:
        os.close(dir_fd)


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _write_remote(fs: pafs.FileSystem, folder: str, name: str, data: bytes) -> Written:
    path = posixpath.join(folder, name)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        with fs.open_input_file(path) as file:
            try:
                return Written(path, rows_in(file.read()), len(data))
            except ArchiveError:
                logger.warning("%s is not a whole Parquet file (cut short or corrupt): writing it again", path)
    fs.create_dir(folder, recursive=True)
    tmp = posixpath.join(folder, f".{name}{TMP_SUFFIX}")
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    with fs.open_input_file(tmp) as file:
        rows = rows_in(file.read())
    fs.move(tmp, path)
    return Written(path, rows, len(data), info.type == pafs.FileType.File)


__all__ = [
    "JSON_COLUMNS",
    "ROW_GROUP",
    "SCHEMA",
    "ArchiveTarget",
    "Entry",
    "Rows",
    "Written",
    "day_of",
    "deciding_rule",
    "encode",
    "file_name",
    "partition_dir",
    "rows_by_partition",
    "rows_in",
]
