"""The arguments of ``hookbus audit archive`` and ``hookbus audit query``.

Only the standard library, like :mod:`hookbus.cli`: building the parser must not load what the
commands run with (pyarrow, DuckDB, redis).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every start
if TYPE_CHECKING:
    import argparse


def add_archive_commands(actions: argparse._SubParsersAction[argparse.ArgumentParser], log_source: object) -> None:
    """``archive`` and ``query`` under ``hookbus audit`` (``log_source`` adds --redis-url/--state-dir/--key-prefix)."""
    archive = actions.add_parser(
        "archive", help="keep every record in Parquet files by day and tenant, as a durable consumer group"
    )
    log_source(archive)  # type: ignore[operator]
    archive.add_argument(
        "--to", required=True, metavar="DIR", help="a folder, or a pyarrow filesystem URI (s3://bucket/prefix ...)"
    )
    archive.add_argument("--group", default="archive", metavar="NAME", help="the consumer group (default archive)")
    archive.add_argument("--consumer", default="archiver", metavar="NAME", help="consumer name (default archiver)")
    archive.add_argument(
        "--start",
        choices=("oldest", "now"),
        default="oldest",
        help="where a new group starts: the oldest record kept (default) or the next one",
    )
    archive.add_argument(
        "--batch", type=int, default=100_000, metavar="N", help="write once N records are gathered (default 100000)"
    )
    archive.add_argument(
        "--every",
        type=float,
        default=300.0,
        metavar="S",
        help="write at least every S seconds while records come (default 300)",
    )
    archive.add_argument(
        "--claim-idle",
        type=float,
        default=60.0,
        metavar="S",
        help="take over records another consumer of the group left pending this long (default 60)",
    )
    query = actions.add_parser("query", help="SQL (DuckDB) over the archive and what Redis still holds, read-only")
    query.add_argument("sql", metavar="SQL", help='a query of the view records, e.g. "SELECT count(*) FROM records"')
    query.add_argument("--archive", metavar="DIR", help="the archive folder (default $HOOKBUS_ARCHIVE_DIR)")
    query.add_argument("--format", choices=("table", "jsonl", "csv"), default="table", help="output (default table)")
    query.add_argument("--tenant", metavar="T", help="only this tenant's records: no SQL can read another's")
    query.add_argument(
        "--group", default="archive", metavar="NAME", help="the archiver's group: Redis adds what it has not archived"
    )
    query.add_argument("--no-redis", action="store_true", help="the archive alone, without the log's unarchived tail")
    log_source(query)  # type: ignore[operator]


__all__ = ["add_archive_commands"]
