"""``hookbus audit query SQL``: SQL over the audit archive and what Redis still holds, as a table, JSON Lines or CSV.

The SQL reads the view ``records`` (:mod:`bus.decisionlog.archivesql`): the archive's records
(``--archive DIR``, else ``$HOOKBUS_ARCHIVE_DIR``), then the decision log's records the archive
group has not acknowledged yet, each once. It runs read-only: no file but the archive's, no
network. ``--tenant T`` narrows the view to one tenant, so that nothing in the SQL can read
another's; ``--no-redis`` reads the archive alone.
"""

from __future__ import annotations

import asyncio
import csv
import datetime
import os
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any, Final

import orjson
import pyarrow as pa

from bus.decisionlog.archivesql import ReadOnlyQuery, archive_files, tail_table
from bus.errors import ConfigError
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.stream.partitions import bus_keyspace
from hookbus.audit.archive import ARCHIVE_GROUP
from hookbus.audit.command import _cell

#: Where ``audit query`` looks for the archive without ``--archive``.
ARCHIVE_ENV: Final = "HOOKBUS_ARCHIVE_DIR"
FORMATS: Final = ("table", "jsonl", "csv")
#: The widest cell of ``--format table``; longer values are cut with an ellipsis.
CELL_CHARS: Final = 60


async def _tail(redis_url: str, keys: Keyspace, group: str, tenant: str | None) -> pa.Table:
    client = connect(redis_url, socket_timeout_s=30.0)
    try:
        keys = await bus_keyspace(client, keys)
        return await tail_table(client, keys, group, tenant)
    finally:
        await client.aclose()


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, dict | list):
        return orjson.dumps(value, default=str).decode()
    return str(value)


def write_table(names: Sequence[str], rows: Iterable[Sequence[Any]], out: IO[str]) -> int:
    """Aligned columns with a header; cells past :data:`CELL_CHARS` are cut."""
    cells = []
    numeric = [True] * len(names)
    for row in rows:
        line = []
        for index, value in enumerate(row):
            text = " ".join(_text(value).split())
            line.append(text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…")
            if value is not None and not isinstance(value, int | float):
                numeric[index] = False
        cells.append(line)
    widths = [max([len(name), *(len(line[i]) for line in cells)]) for i, name in enumerate(names)]

    def render(line: Sequence[str]) -> str:
        return "  ".join(
            text.rjust(width) if right else text.ljust(width)
            for text, width, right in zip(line, widths, numeric, strict=True)
        ).rstrip()

    out.write(render(names) + "\n")
    out.write("  ".join("-" * width for width in widths) + "\n")
    for line in cells:
        out.write(render(line) + "\n")
    out.write(f"({len(cells)} row{'' if len(cells) == 1 else 's'})\n")
    return len(cells)


def write_rows(names: Sequence[str], rows: Iterable[Sequence[Any]], out: IO[str], fmt: str) -> int:
    """``rows`` as ``fmt`` (:data:`FORMATS`) to ``out``; returns how many."""
    if fmt == "table":
        return write_table(names, rows, out)
    count = 0
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
        writer.writerow(names)
        for row in rows:
            writer.writerow([_cell(_text(value) if value is not None else None) for value in row])
            count += 1
        return count
    for row in rows:
        out.write(orjson.dumps(dict(zip(names, row, strict=True)), default=str).decode() + "\n")
        count += 1
    return count


async def query(
    sql: str,
    archive: str | None,
    redis_url: str | None,
    keys: Keyspace,
    out: IO[str],
    *,
    fmt: str = "table",
    tenant: str | None = None,
    group: str = ARCHIVE_GROUP,
) -> int:
    """Answer ``sql`` over ``archive`` (None: none) and, with ``redis_url``, the log's unarchived tail.

    Returns how many rows were written to ``out``."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    if not sql.strip():
        raise ConfigError('give the SQL to run, e.g. "SELECT decision, count(*) FROM records GROUP BY 1"')
    files = archive_files(archive, tenant) if archive else []
    tail = await _tail(redis_url, keys, group, tenant) if redis_url else None

    def answer() -> int:
        with ReadOnlyQuery(files, tail) as db:
            names, rows = db.run(sql)
            return write_rows(names, rows, out, fmt)

    return await asyncio.to_thread(answer)


def query_command(args: Any, redis_url: str | None, keys: Keyspace) -> int:
    """``hookbus audit query``."""
    archive = args.archive or os.environ.get(ARCHIVE_ENV) or None
    if archive is None and redis_url is None:
        raise ConfigError(f"--no-redis needs an archive: pass --archive DIR or set {ARCHIVE_ENV}")
    count = asyncio.run(
        query(args.sql, archive, redis_url, keys, sys.stdout, fmt=args.format, tenant=args.tenant, group=args.group)
    )
    if args.format != "table":
        print(f"hookbus: {count} rows", file=sys.stderr)
    sys.stdout.flush()
    return 0


__all__ = ["ARCHIVE_ENV", "CELL_CHARS", "FORMATS", "query", "query_command", "write_rows", "write_table"]
