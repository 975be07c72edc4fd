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

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
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
from bus.decisionlog.archiverows import (
    JSON_COLUMNS,
    ROW_GROUP,
    SCHEMA,
    Entry,
    Rows,
    _keys,
    add_entries,
    add_read,
    day_of,
    deciding_rule,
    partition_dir,
    rows_by_partition,
)
from bus.errors import ConfigError

logger = logging.getLogger("hookbus.audit.archive")


def file_name(rows: Rows | Sequence[str]) -> str:
    """The name of the file holding ``rows`` (or the records of these keys, ``"<log_id> <id>"``):
    the same records, the same name."""
    if isinstance(rows, Rows):  # the keys joined by Arrow, not one Python string per row
        keys = _keys(rows.table()).combine_chunks()
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(keys)], pa.int32()), keys), "\n")
        text = (joined[0].as_py() or "").encode()
    else:
        text = "\n".join(rows).encode()
    return f"part-{hashlib.sha256(text).hexdigest()[:24]}.parquet"


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
            log_ids = part.table()["log_id"].to_pylist()
            since_ms = min(int(log_id.split("-", 1)[0]) for log_id in log_ids) - 1000 if log_ids else 0
            folder = partition_dir(day, tenant)
            if self.fs is None:
                found = log_ids_local(self.root, folder, since_ms)
            else:
                found = log_ids_remote(self.fs, f"{self.root}/{folder}", since_ms)
            rest = part.without(found) if found else part
            if len(rest):
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
    "add_read",
    "day_of",
    "deciding_rule",
    "encode",
    "file_name",
    "partition_dir",
    "rows_by_partition",
]
