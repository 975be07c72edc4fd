"""The audit archive: how fast ``hookbus audit archive`` writes, what a record costs on disk, and
how fast ``hookbus audit query`` answers over ten million archived records.

1. **Write rate.** ``--records`` decision-log records (4 tenants, 1,000 sessions, 30 rules, a
   fifth of them denies, Bash commands of varied length) are added to an embedded Redis; then,
   in the same run, a bare consumer group reads and acknowledges them all (the floor: a follower
   that writes nothing), and the archiver (:class:`hookbus.audit.archive.Archiver`) archives
   them all. Also the writer alone (rows and files, no Redis). Disk: the archive's bytes per
   million records, beside the same records as ``audit export`` JSON Lines.
2. **Query.** ``--query-records`` synthetic records (a year of 4 tenants, ``--files-per-day``
   files per day and tenant) are written straight to Parquet through the same writer
   (:meth:`bus.decisionlog.parquet.ArchiveTarget.write`), then each query runs ``--rounds``
   times the way ``hookbus audit query --no-redis`` runs it (list the files, make the read-only
   database, run, fetch), beside DuckDB reading the same files with a bare ``read_parquet`` glob.

Usage: ``python bench/audit_archive.py [--records 200000] [--query-records 10000000]
[--files-per-day 1] [--rounds 5] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import random
import shutil
import statistics
import tempfile
import time
from itertools import chain
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from bus.decisionlog.archivesql import ReadOnlyQuery, archive_files
from bus.decisionlog.parquet import SCHEMA, ArchiveTarget, Rows, add_read, day_of
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord
from hookbus.audit.archive import Archiver
from hookbus.audit.command import record_json
from hookbus.platform.redis_server import EmbeddedRedis

TENANTS = ("acme", "globex", "initech", "umbrella")
RULES = [f"rule-{n:02d}" for n in range(30)]
COMMANDS = [
    "git status",
    "ls -la {n}",
    "npm test -- --grep case{n}",
    "rm -rf build/{n}",
    "curl -s https://example.com/api/{n} | jq .items",
    "python -m pytest tests/test_{n}.py -x -q",
    "cat src/module_{n}.py",
    "docker run --rm -v $PWD:/w image:{n} make",
]
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000
DENIES_PER_RULE_PER_WEEK = (
    "SELECT date_trunc('week', day)::DATE AS week, rule, count(*) AS denies FROM records "
    "WHERE tenant = 'acme' AND decision = 'deny' GROUP BY ALL ORDER BY week, rule"
)
BY_DECISION = "SELECT decision, count(*) FROM records GROUP BY ALL ORDER BY ALL"


def record(i: int, rng: random.Random, at_ms: int) -> LogRecord:
    deny = rng.random() < 0.2
    rule = rng.choice(RULES)
    session = f"s-{rng.randrange(1000):04d}"
    command = rng.choice(COMMANDS).format(n=rng.randrange(100_000))
    hook_input = {
        "session_id": session,
        "hook_event_name": "PreToolUse",
        "cwd": f"/home/dev/repo-{rng.randrange(50)}",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "run it"},
        "tool_use_id": f"toolu_{i:012d}",
    }
    decision = "deny" if deny else "allow"
    return LogRecord(
        event_id=f"{i:08x}-4e2a-4b6c-9d1e-{rng.getrandbits(48):012x}",
        event="PreToolUse",
        tenant=TENANTS[i % len(TENANTS)],
        session_id=session,
        outcome="decided",
        decision=decision,
        output={"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision}},
        payload=orjson.dumps(hook_input),
        received_ms=at_ms,
        decided_ms=at_ms + rng.randrange(1, 6),
        tool_name="Bash",
        tool_use_id=f"toolu_{i:012d}",
        revision="3f9a1c2b7d4e",
        reason=f"{rule} matched" if deny else "",
        hooks=[{"id": rule, "type": "rule", "outcome": "ok", "duration_ms": 0, "decided": True}],
    )


def link(i: int) -> str:
    """A hash-chain link of the shape the settle script writes (``partition:seq:previous hash:hash``)."""
    return f"0:{i + 1}:{i:040x}:{i + 1:040x}"


async def fill(url: str, keys: Keyspace, count: int) -> None:
    """``count`` records, each with the fields the settle script writes (its link too)."""
    rng = random.Random(1)
    redis = connect(url)
    try:
        for start in range(0, count, 10_000):
            async with redis.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + 10_000)):
                    fields = {**record(i, rng, START_MS + i * 10).encode(), "ch": link(i)}
                    pipe.xadd(keys.decision_log(), fields)  # type: ignore[arg-type]
                await pipe.execute()
    finally:
        await redis.aclose()


async def floor(url: str, keys: Keyspace, count: int) -> float:
    """Seconds for a bare consumer group to read and acknowledge ``count`` records."""
    redis = connect(url)
    log = keys.decision_log()
    await redis.xgroup_create(log, "floor", id="0")
    start, done = time.perf_counter(), 0
    try:
        while done < count:
            response = await redis.xreadgroup("floor", "floor", {log: ">"}, count=10_000)
            entries = [entry for _, found in response for entry in found]
            await redis.xack(log, "floor", *[entry_id for entry_id, _ in entries])
            done += len(entries)
        return time.perf_counter() - start
    finally:
        await redis.aclose()


async def archive(url: str, keys: Keyspace, root: Path, count: int) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds for the archiver to archive ``count`` records."""
    archiver = Archiver(url, keys, ArchiveTarget(str(root)), batch=min(count, 100_000), every_s=3600)
    stop = asyncio.Event()
    start, cpu = time.perf_counter(), time.process_time()
    task = asyncio.create_task(archiver.run(stop))
    while archiver.delivered < count:  # noqa: ASYNC110  (the archiver has no event to wait on)
        await asyncio.sleep(0.01)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    stop.set()
    await task
    return elapsed, cpu


def write_rate(args: argparse.Namespace, work: Path) -> None:
    server = EmbeddedRedis(work / "redis", persistent=False).start()
    keys = Keyspace()
    try:
        asyncio.run(fill(server.url, keys, args.records))
        floor_s = asyncio.run(floor(server.url, keys, args.records))
        archive_s, archive_cpu_s = asyncio.run(archive(server.url, keys, work / "archive", args.records))
        entries = asyncio.run(_entries(server.url, keys))
    finally:
        server.stop()
    start = time.perf_counter()
    parts: dict[tuple[str, str], Rows] = {}
    for at in range(0, len(entries), 10_000):  # as the archiver takes its reads
        read = entries[at : at + 10_000]
        add_read(parts, [i.encode() for i, _ in read], [list(chain.from_iterable(f.items())) for _, f in read])
    ArchiveTarget(str(work / "writer")).write(parts)
    writer_s = time.perf_counter() - start
    size = sum(path.stat().st_size for path in (work / "archive").rglob("*.parquet"))
    jsonl = sum(len(orjson.dumps(record_json(log_id, LogRecord.decode(f)))) + 1 for log_id, f in entries)
    n = args.records
    print(f"## write rate: {n:,} records, {len(list((work / 'archive').rglob('*.parquet')))} files\n")
    print("| path | seconds | records/s | vs floor |\n|---|---:|---:|---:|")
    print(f"| floor: XREADGROUP + XACK, nothing written | {floor_s:.2f} | {n / floor_s:,.0f} | 1.00 |")
    print(
        f"| **hookbus audit archive** (Redis to Parquet, synced) | {archive_s:.2f} | {n / archive_s:,.0f} | "
        f"{floor_s / archive_s:.2f} |"
    )
    print(f"| archiver CPU (its process, not Redis) | {archive_cpu_s:.2f} | {n / archive_cpu_s:,.0f} per CPU s | - |")
    print(f"| the writer alone (rows and files, no Redis) | {writer_s:.2f} | {n / writer_s:,.0f} | - |")
    print(
        f"\ndisk per million records: Parquet {size / n:.0f} B/record = {size * 1e6 / n / 2**20:.1f} MiB; "
        f"JSON Lines {jsonl / n:.0f} B/record = {jsonl * 1e6 / n / 2**20:.1f} MiB "
        f"({jsonl / size:.1f}x)\n"
    )


async def _entries(url: str, keys: Keyspace) -> list[tuple[str, Any]]:
    redis = connect(url)
    try:
        return [(i.decode(), f) for i, f in await redis.xrange(keys.decision_log())]
    finally:
        await redis.aclose()


SESSIONS = [f"s-{n:04d}" for n in range(1000)]
INPUTS = [
    orjson.dumps({"tool_name": "Bash", "tool_input": {"command": command.format(n=n)}}).decode()
    for command in COMMANDS
    for n in range(500)
]
HOOKS = {rule: f'[{{"id":"{rule}","type":"rule","outcome":"ok","duration_ms":0,"decided":true}}]' for rule in RULES}
OUTPUTS = {
    d: f'{{"hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"{d}"}}}}'
    for d in ("allow", "deny")
}


def synthetic(day: int, tenant: str, count: int, part: int, rng: random.Random) -> Rows:
    """``count`` records of one tenant on day ``day`` of the year, built column by column."""
    base = START_MS + day * DAY_MS + part * (DAY_MS // 64)
    times = sorted(rng.choices(range(base, base + DAY_MS // 64), k=count))
    decisions = rng.choices(("allow", "deny"), weights=(4, 1), k=count)
    rules = rng.choices(RULES, k=count)
    log_ids = [f"{t + 3}-{i}" for i, t in enumerate(times)]
    ids = [f"{day:03d}{part:02d}{i:07d}-{tenant}" for i in range(count)]
    nothing = [None] * count
    columns = dict(
        log_id=log_ids,
        id=ids,
        time=times,
        event=["PreToolUse"] * count,
        session_id=rng.choices(SESSIONS, k=count),
        agent=["claude"] * count,
        agent_id=nothing,
        agent_type=nothing,
        tool_name=["Bash"] * count,
        tool_use_id=[f"toolu_{i}" for i in ids],
        outcome=["decided"] * count,
        fail_open=nothing,
        decision=decisions,
        reason=[f"{r} matched" if d == "deny" else None for r, d in zip(rules, decisions, strict=True)],
        rule=rules,
        received_ms=times,
        decided_ms=[t + 3 for t in times],
        latency_ms=[3] * count,
        revision=["3f9a1c2b7d4e"] * count,
        trace_id=nothing,
        token_id=[f"tk_{tenant}"] * count,
        client_address=["10.0.0.7"] * count,
        hooks=[HOOKS[r] for r in rules],
        shadow=["[]"] * count,
        masked=["[]"] * count,
        output=[OUTPUTS[d] for d in decisions],
        input=rng.choices(INPUTS, k=count),
        extra=nothing,
    )
    return Rows(pa.table(columns, schema=SCHEMA))


def timed(run: Any, rounds: int) -> tuple[float, float, Any]:
    times, answer = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        answer = run()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), answer


def generate(args: argparse.Namespace, root: Path) -> None:
    """A year of synthetic records of every tenant, written through the archive's writer."""
    rng = random.Random(2)
    per_file = args.query_records // (365 * len(TENANTS) * args.files_per_day)
    target = ArchiveTarget(str(root))
    start = time.perf_counter()
    for day in range(365):
        for tenant in TENANTS:
            for part in range(args.files_per_day):
                rows = synthetic(day, tenant, per_file, part, rng)
                target.write({(day_of(START_MS + day * DAY_MS), tenant): rows})
    made_s = time.perf_counter() - start
    total = per_file * 365 * len(TENANTS) * args.files_per_day
    print(f"written in {made_s:.0f} s ({total / made_s:,.0f} records/s through the writer)\n")


def query_speed(args: argparse.Namespace, root: Path) -> None:
    files = archive_files(str(root))
    size = sum(Path(p).stat().st_size for p in files)
    with ReadOnlyQuery(files) as db:
        _, found = db.run("SELECT count(*) FROM records")
        [(total,)] = list(found)
    print(
        f"## query: {total:,} records in {len(files):,} files, {size / 2**20:,.0f} MiB ({size / total:.0f} B/record)\n"
    )

    def ours(sql: str, tenant: str | None) -> Any:
        with ReadOnlyQuery(archive_files(str(root), tenant)) as db:
            _, found = db.run(sql)
            return list(found)

    def bare(sql: str) -> Any:
        with duckdb.connect() as db:
            glob = f"{root}/*/*/*.parquet"
            db.execute(f"CREATE VIEW records AS SELECT * FROM read_parquet('{glob}', hive_partitioning = true)")
            return db.execute(sql).fetchall()

    print(f"{args.rounds} rounds each, seconds (best / median):\n")
    print("| query | hookbus audit query | bare DuckDB glob | ratio (median) |\n|---|---:|---:|---:|")
    for name, sql, tenant in (
        ("denies per rule per week, one tenant (`--tenant acme`)", DENIES_PER_RULE_PER_WEEK, "acme"),
        ("the same, over every tenant's files (`WHERE tenant = 'acme'`)", DENIES_PER_RULE_PER_WEEK, None),
        ("records by decision, the whole archive", BY_DECISION, None),
    ):
        best, median, answer = timed(lambda s=sql, t=tenant: ours(s, t), args.rounds)
        bare_best, bare_median, expected = timed(lambda s=sql: bare(s), args.rounds)
        assert answer == expected or tenant is not None, (answer[:3], expected[:3])
        print(
            f"| {name} ({len(answer)} rows) | {best:.2f} / {median:.2f} | {bare_best:.2f} / {bare_median:.2f} | "
            f"{median / bare_median:.2f} |"
        )

    best, median, _ = timed(lambda: pyarrow_alone(root), args.rounds)
    print(f"\nthe first query with pyarrow alone (datasets and compute, no DuckDB): {best:.2f} / {median:.2f} s")


def pyarrow_alone(root: Path) -> list[tuple[Any, ...]]:
    """The denies-per-rule-per-week answer with pyarrow's datasets and compute, no DuckDB (the alternative)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    dataset = pads.dataset(str(root), format="parquet", partitioning="hive")
    table = dataset.to_table(
        columns=["time", "rule"], filter=(pc.field("tenant") == "acme") & (pc.field("decision") == "deny")
    )
    weeks = pc.floor_temporal(table["time"], unit="week", week_starts_monday=True)
    grouped = pa.table({"week": weeks, "rule": table["rule"]}).group_by(["week", "rule"]).aggregate([("rule", "count")])
    return sorted(grouped.to_pylist(), key=lambda row: (row["week"], row["rule"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--query-records", type=int, default=10_000_000)
    parser.add_argument("--files-per-day", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-write", action="store_true", help="only the query part")
    parser.add_argument("--skip-query", action="store_true", help="only the write part")
    parser.add_argument("--keep", type=Path, help="keep the query archive in DIR (made again if empty)")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f} (2 cores: other processes take CPU above 2)")
    print(
        f"duckdb {duckdb.__version__}, pyarrow {__import__('pyarrow').__version__}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}Z\n"
    )
    work = Path(tempfile.mkdtemp(prefix="hookbus-bench-archive-"))
    try:
        if not args.skip_write:
            write_rate(args, work)
        if args.skip_query:
            return
        root = args.keep or work / "query"
        if root.exists() and any(root.glob("day=*")):
            print(f"(the query archive in {root}, kept from an earlier run)\n")
        else:
            generate(args, root)
        query_speed(args, root)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
