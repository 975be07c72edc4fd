"""SQL over the audit archive and the decision log's unarchived tail: DuckDB in-process, read-only.

A query sees one view, ``records``: every record of the archive's Parquet files
(:mod:`bus.decisionlog.parquet`; columns of :data:`~bus.decisionlog.parquet.SCHEMA` plus ``day``
and ``tenant`` from the path) and, after them, the records Redis still holds that the archive
group has not acknowledged (the tail), less those already in a file (the same ``id`` and
``log_id``: written, not yet acknowledged). ``archived`` and ``live`` are the two halves.

The query runs on a DuckDB database made for it and opened read-only, with the configuration
locked after ``enable_external_access`` is turned off: its SQL reads exactly the files the view
names and nothing else (``read_csv('/etc/passwd')``, ``COPY ... TO``, ``ATTACH``, ``INSTALL`` /
``LOAD`` of extensions such as httpfs are refused), and cannot turn any of that back on. With a
``tenant`` the view names only that tenant's files and tail records, so no SQL reaches another
tenant's: the other files are not allowed paths.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, Final
from urllib.parse import quote

import duckdb
import pyarrow as pa
import redis.asyncio as aioredis

from bus.decisionlog.audit import RecordFilter
from bus.decisionlog.parquet import SCHEMA, Entry, rows_by_partition
from bus.decisionlog.reader import read_merged
from bus.errors import ArchiveError, RedisCommandError
from bus.redis.connection import redis_errors
from bus.redis.keys import Keyspace

#: The columns of ``records``: the files' and the two of the path.
COLUMNS: Final = (*SCHEMA.names, "day", "tenant")
_VIEW_SCHEMA: Final = pa.schema([*SCHEMA, ("day", pa.date32()), ("tenant", pa.string())])


def archive_files(root: str, tenant: str | None = None) -> list[str]:
    """The Parquet files of the archive at ``root`` (of one tenant's folders), sorted; symbolic
    links and files under a temporary name are not listed."""
    if not os.path.isdir(root):
        raise ArchiveError(f"no archive at {root}: not a folder")
    found = []
    want = None if tenant is None else f"tenant={quote(tenant, safe='')}"
    with os.scandir(root) as days:
        day_dirs = sorted(d.path for d in days if d.name.startswith("day=") and d.is_dir(follow_symlinks=False))
    for day in day_dirs:
        with os.scandir(day) as tenants:
            tenant_dirs = [
                t.path
                for t in tenants
                if t.name.startswith("tenant=") and (want is None or t.name == want) and t.is_dir(follow_symlinks=False)
            ]
        for folder in sorted(tenant_dirs):
            with os.scandir(folder) as files:
                found.extend(
                    sorted(
                        os.path.abspath(f.path)
                        for f in files
                        if f.name.endswith(".parquet")
                        and not f.name.startswith(".")
                        and f.is_file(follow_symlinks=False)
                    )
                )
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def tail_starts(redis: aioredis.Redis, keys: Keyspace, group: str) -> list[str]:
    """Where each partition's unarchived tail starts (an ``XRANGE`` bound): the group's oldest
    pending record, else just past the last one it was given; the whole log without the group."""
    starts = []
    for log in keys.decision_logs:
        try:
            with redis_errors():
                groups = await redis.xinfo_groups(log)
        except RedisCommandError:  # no log yet
            starts.append("-")
            continue
        found = next((g for g in groups if _text(g.get("name", "")) == group), None)
        if found is None:
            starts.append("-")
            continue
        summary = await redis.xpending(log, group) if int(found.get("pending") or 0) else {}
        if summary.get("min"):
            starts.append(_text(summary["min"]))
        else:
            starts.append(f"({_text(found.get('last-delivered-id') or '0-0')}")
    return starts


async def tail_entries(
    redis: aioredis.Redis, keys: Keyspace, group: str, tenant: str | None = None, *, limit: int | None = None
) -> list[Entry]:
    """The decision log's entries past the archive group (of one tenant, mostly: :func:`view_rows`
    keeps that tenant's only). ArchiveError past ``limit`` entries read."""
    may_pass = RecordFilter(scope=tenant).entry_filter()
    entries: list[Entry] = []
    read = 0
    with redis_errors():
        starts = await tail_starts(redis, keys, group)
        async for entry in read_merged(redis, keys.decision_logs, low=starts):
            read += 1
            if limit is not None and read > limit:
                raise ArchiveError(
                    f"Redis holds more than {limit} records the archive group {group!r} has not taken: "
                    "is hookbus audit archive running?"
                )
            if entry.fields and (may_pass is None or may_pass(entry.fields)):
                entries.append((entry.log_id, entry.fields))
    return entries


async def tail_table(redis: aioredis.Redis, keys: Keyspace, group: str, tenant: str | None = None) -> pa.Table:
    """The decision log's records past the archive group (of one tenant), as rows of ``records``."""
    return view_rows(await tail_entries(redis, keys, group, tenant), tenant)


def view_rows(entries: Sequence[Entry], tenant: str | None = None) -> pa.Table:
    """Log entries (of one tenant) as rows of ``records``: the files' columns, ``day`` and ``tenant``."""
    parts, _ = rows_by_partition(entries)
    tables = []
    for (day, owner), rows in parts.items():
        if tenant is not None and owner != tenant:
            continue
        table = rows.table()
        table = table.append_column("day", pa.array([datetime.date.fromisoformat(day)] * table.num_rows, pa.date32()))
        tables.append(table.append_column("tenant", pa.array([owner] * table.num_rows, pa.string())))
    return pa.concat_tables(tables) if tables else _VIEW_SCHEMA.empty_table()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _view_sql(files: Sequence[str], has_tail: bool) -> list[str]:
    if files:
        listed = ", ".join(_literal(path) for path in files)
        archived = (  # the paths are quoted as SQL strings (_literal): listed files, not input
            f"CREATE VIEW archived AS SELECT * FROM read_parquet([{listed}], hive_partitioning = true, "  # noqa: S608
            "hive_types = {'day': DATE, 'tenant': VARCHAR}, hive_types_autocast = false)"
        )
    else:
        archived = "CREATE VIEW archived AS SELECT * FROM live WHERE false"
    if not has_tail:
        records = "CREATE VIEW records AS SELECT * FROM archived"
    elif not files:
        records = "CREATE VIEW records AS SELECT * FROM live"
    else:
        records = (
            "CREATE VIEW records AS SELECT * FROM archived UNION ALL BY NAME "
            "SELECT * FROM live l WHERE NOT EXISTS (SELECT 1 FROM archived a "
            "WHERE a.day >= (SELECT min(day) FROM live) AND a.id = l.id AND a.log_id = l.log_id)"
        )
    return [archived, records]


class ReadOnlyQuery:
    """A DuckDB database of ``files`` and ``tail`` (:func:`tail_table`; None: no tail) that runs SQL read-only.

    Made in a private temporary folder, removed by :meth:`close`.
    """

    def __init__(self, files: Sequence[str], tail: pa.Table | None = None, *, threads: int | None = None) -> None:
        tail = _VIEW_SCHEMA.empty_table() if tail is None else tail
        self._folder = tempfile.mkdtemp(prefix="hookbus-query-")
        path = os.path.join(self._folder, "query.duckdb")
        base: dict[str, Any] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
        if threads is not None:
            base["threads"] = threads
        try:
            with duckdb.connect(path, config=base) as setup:
                setup.register("tail_rows", tail.cast(_VIEW_SCHEMA))
                setup.execute("CREATE TABLE live AS SELECT * FROM tail_rows")
                setup.unregister("tail_rows")
                for statement in _view_sql(files, tail.num_rows > 0):
                    setup.execute(statement)
            self.db = duckdb.connect(path, read_only=True, config=base)
            self.db.execute("SET allowed_paths = $paths", {"paths": list(files)})
            self.db.execute("SET enable_external_access = false")
            self.db.execute("SET lock_configuration = true")
        except duckdb.Error as exc:
            self.close()
            raise ArchiveError(f"cannot open the archive: {_one_line(exc)}") from exc

    def run(self, sql: str, page: int = 10_000) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
        """The column names of ``sql``'s answer and its rows, fetched a page at a time;
        ArchiveError (one line) for SQL that fails or is refused, before or while the rows come."""
        with _mapped():
            result = self.db.execute(sql)
        names = [str(column[0]) for column in result.description or ()]

        def fetched() -> Iterator[tuple[Any, ...]]:
            while True:
                with _mapped():
                    chunk = result.fetchmany(page)
                if not chunk:
                    return
                yield from chunk

        return names, fetched()

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            db.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> ReadOnlyQuery:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except duckdb.PermissionException as exc:
        raise ArchiveError(f"refused: {_one_line(exc)} (a query reads the archive only)") from exc
    except duckdb.Error as exc:
        raise ArchiveError(f"the query failed: {_one_line(exc)}") from exc


__all__ = ["COLUMNS", "ReadOnlyQuery", "archive_files", "tail_entries", "tail_starts", "tail_table", "view_rows"]
