"""``hookbus audit verify``: check the hash chains of an export, an archive or the live log.

Records are read in log order, each partition's chain in its own order
(:class:`bus.decisionlog.chain.ChainCheck`), and the first record altered, deleted or
reordered is named with its log id, event id, partition and sequence number (exit status 1;
0 when every chain holds). A file is a ``hookbus audit export`` in JSON Lines (an export of a
time window is checked from its first record on; one filtered by tenant, session, event,
decision or agent has gaps by design and reads as deleted records). ``--live`` reads every
partition's log in Redis, and its chain head: records deleted after the last one kept are
found too. ``--archive DIR`` reads the Parquet files of ``hookbus audit archive`` (each record
as the log held it, rebuilt from its columns; in log order) and checks what they hold (a
record trimmed from the log before the archiver took it reads as deleted). With ``--trust
KEY`` the signed checkpoints kept in Redis are checked as well
(:mod:`bus.decisionlog.checkpoints`), and ``--sign KEYFILE`` appends a new one per partition
once the log is found whole.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Final

import orjson

from bus.decisionlog.chain import Break, ChainCheck
from bus.decisionlog.checkpoints import (
    append_checkpoint,
    chain_head,
    checkpoint_problem,
    parse_public_keys,
    read_checkpoints,
    sign_checkpoint,
)
from bus.decisionlog.reader import read_merged
from bus.errors import ConfigError, ProtocolError
from bus.policy.signing import load_private_key
from bus.redis.connection import connect, redis_errors
from bus.redis.keys import Keyspace
from bus.stream.partitions import bus_keyspace
from bus.stream.protocol import LogRecord, now_ms
from hookbus.audit.command import record_json


def _lines(file: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(file, 1):
        if line.strip():
            yield number, line


def check_file(file: IO[bytes]) -> ChainCheck:
    """Check a JSON Lines export read from ``file``."""
    check = ChainCheck()
    for number, line in _lines(file):
        try:
            view = orjson.loads(line)
        except orjson.JSONDecodeError:
            view = None
        if not isinstance(view, dict):
            check.unreadable(f"line {number}", "it is not a JSON record")
            continue
        check.add(f"{view.get('log_id') or '?'} (line {number})", view)
    return check


async def check_live(
    redis_url: str, keys: Keyspace, trust: list[str] | None = None, sign_keyfile: str | None = None
) -> tuple[ChainCheck, int]:
    """Check every partition's log in Redis (and its checkpoints, with ``trust``); append a signed
    checkpoint per partition with ``sign_keyfile`` when no chain is broken. Returns the check and
    how many checkpoints verified."""
    trusted = parse_public_keys(trust or [])
    signing_key = load_private_key(sign_keyfile) if sign_keyfile else None
    client = connect(redis_url, socket_timeout_s=30.0)
    check, verified, heads = ChainCheck(), 0, {}
    try:
        with redis_errors(redis_url):
            keys = await bus_keyspace(client, keys)
            for partition in keys.all_partitions:
                heads[partition] = await chain_head(client, keys, partition)
                newest = None
                for entry_id, checkpoint in await read_checkpoints(client, keys, partition) if trusted else []:
                    where = f"checkpoint {entry_id} of partition {partition}"
                    problem = (
                        "it is not a checkpoint"
                        if checkpoint is None
                        else checkpoint_problem(checkpoint, trusted, keys.prefix)
                    )
                    if problem is not None or checkpoint is None:
                        check.unreadable(where, problem or "")
                        continue
                    check.expect(partition, checkpoint.seq, checkpoint.hash, where)
                    newest, verified = (checkpoint, where), verified + 1
                async for entry in read_merged(client, [keys.decision_log(partition)]):
                    try:
                        check.add(entry.log_id, record_json(entry.log_id, LogRecord.decode(entry.fields)))
                    except ProtocolError:
                        check.unreadable(entry.log_id, "it is not a decision-log record")
                if (head := heads[partition]) is not None:
                    check.check_head(partition, head)
                if newest is not None:
                    check.check_head(partition, (newest[0].seq, newest[0].hash), newest[1])
            if signing_key is not None and check.first_break() is None:
                for partition, head in heads.items():
                    if head is not None:
                        await append_checkpoint(
                            client, keys, sign_checkpoint(signing_key, keys.prefix, partition, head, now_ms())
                        )
    finally:
        await client.aclose()
    return check, verified


#: The stream fields of a record that the archive keeps in ``extra`` (the rest of ``extra`` is the record JSON's).
_EXTRA_FIELDS: Final = ("ch",)
#: Record JSON keys a decision-log record cannot be read without (empty ones are left out of the archive).
_REQUIRED: Final = {"ev": "", "sid": "", "dec": "", "out": {}}


def archived_fields(row: Mapping[str, Any]) -> dict[bytes, bytes]:
    """The stream fields of the record an archive row was written from (:class:`bus.decisionlog.parquet.Rows`)."""
    from bus.decisionlog.archivebatch import FROM_META, JSON_FROM_META

    extra = orjson.loads(row["extra"]) if row.get("extra") else {}
    fields = {name.encode(): str(extra.pop(name)).encode() for name in _EXTRA_FIELDS if name in extra}
    meta: dict[str, Any] = {"outcome": row["outcome"], "id": row["id"], "tn": row["tenant"]}
    meta |= {key: row[column] for column, key in FROM_META if row.get(column) is not None}
    meta |= {key: orjson.loads(row[column]) for column, key in JSON_FROM_META if row.get(column) is not None}
    meta |= {"ts": row["received_ms"], "dms": row["decided_ms"], **extra}
    meta = {**_REQUIRED, **meta}
    fields |= {b"r": orjson.dumps(meta), b"in": str(row["input"]).encode(), b"o": str(row["outcome"]).encode()}
    return fields | {b"fo": (row.get("fail_open") or "").encode()}


def check_archive(root: str) -> ChainCheck:
    """Check the records of the archive at ``root``, in log order."""
    from bus.decisionlog.archivesql import ReadOnlyQuery, archive_files

    check = ChainCheck()
    order = "CAST(split_part(log_id, '-', 1) AS BIGINT), CAST(split_part(log_id, '-', 2) AS BIGINT), log_id"
    with ReadOnlyQuery(archive_files(root)) as db:
        names, rows = db.run(f"SELECT * FROM archived ORDER BY {order}")  # noqa: S608 - no outside text
        for values in rows:
            row = dict(zip(names, values, strict=True))
            try:
                check.add(str(row["log_id"]), record_json(str(row["log_id"]), LogRecord.decode(archived_fields(row))))
            except (ProtocolError, ValueError, TypeError, KeyError):
                check.unreadable(str(row["log_id"]), "its columns are not a decision-log record")
    return check


def summary(check: ChainCheck, checkpoints: int | None = None) -> str:
    """One line saying what was checked."""
    parts = ", ".join(f"partition {p}: seq {first}-{last}" for p, (first, last) in sorted(check.partitions.items()))
    line = f"{check.checked} records checked" + (f" ({parts})" if parts else "")
    if check.unlinked:
        line += f"; {check.unlinked} written before records were chained"
    if checkpoints is not None:
        line += f"; {checkpoints} signed checkpoints verified"
    return line


def verify_command(args: Any, redis_url: Callable[[], str], keys: Keyspace) -> int:
    """``hookbus audit verify``: 0 when every chain holds, 1 naming the first break."""
    checkpoints: int | None = None
    if args.trust or args.sign:
        if not args.live:
            raise ConfigError("--trust and --sign need --live (checkpoints are kept in Redis)")
    if args.archive:
        check = check_archive(args.archive)
    elif args.live:
        check, checkpoints = asyncio.run(check_live(redis_url(), keys, args.trust, args.sign))
        checkpoints = checkpoints if args.trust else None
    elif args.file == "-":
        check = check_file(sys.stdin.buffer)
    else:
        try:
            with Path(args.file).open("rb") as file:
                check = check_file(file)
        except OSError as exc:
            raise ConfigError(f"cannot read {args.file}: {exc.strerror or exc}") from exc
    found: Break | None = check.first_break()
    if found is not None:
        print(f"hookbus: {found}", file=sys.stderr)
        return 1
    print(f"hookbus: every chain holds: {summary(check, checkpoints)}", file=sys.stderr)
    return 0


__all__ = ["archived_fields", "check_archive", "check_file", "check_live", "summary", "verify_command"]
