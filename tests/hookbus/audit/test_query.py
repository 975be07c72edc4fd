"""``hookbus audit query`` (:mod:`hookbus.audit.query`): the archive plus Redis's unarchived tail, in three formats."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from bus.decisionlog.parquet import ArchiveTarget, rows_by_partition
from bus.errors import ArchiveError, ConfigError
from hookbus.audit.query import CELL_CHARS, query, write_rows
from tests.bus.decisionlog.archive_records import AT_MS, entry, fields_of, log_record
from tests.conftest import BusProbe, run_hookbus

DENIES = "SELECT tenant, rule, count(*) AS denies FROM records WHERE decision = 'deny' GROUP BY ALL ORDER BY ALL"


async def archive_and_tail(bus: BusProbe, root: Path) -> None:
    """Records 0-5 archived, 0-3 acknowledged by group ``archive``, 4-5 not yet; 6-9 in Redis only."""
    ids = []
    for i in range(10):
        record = log_record(
            i, tenant=("acme", "globex")[i % 2], decision="deny" if i % 3 == 0 else "allow", rule=f"r{i % 2}"
        )
        ids.append((await bus.redis.xadd(bus.keys.decision_log(), fields_of(record))).decode())  # type: ignore[arg-type]
    entries = [(log_id, fields) for log_id, fields in await bus.redis.xrange(bus.keys.decision_log(), count=6)]
    ArchiveTarget(str(root)).write(rows_by_partition([(i.decode(), f) for i, f in entries])[0])
    await bus.redis.xgroup_create(bus.keys.decision_log(), "archive", id="0")
    await bus.redis.xreadgroup("archive", "archiver", {bus.keys.decision_log(): ">"}, count=6)
    await bus.redis.xack(bus.keys.decision_log(), "archive", *ids[:4])


async def run(bus: BusProbe, root: Path | None, sql: str, fmt: str = "jsonl", **given: object) -> str:
    out = io.StringIO()
    await query(sql, str(root) if root else None, bus.url, bus.keys, out, fmt=fmt, **given)  # type: ignore[arg-type]
    return out.getvalue()


async def test_the_archive_and_the_tail_each_record_once(bus: BusProbe, tmp_path: Path) -> None:
    await archive_and_tail(bus, tmp_path)
    rows = [
        json.loads(line)
        for line in (await run(bus, tmp_path, "SELECT id, tenant FROM records ORDER BY received_ms")).splitlines()
    ]
    assert [r["id"][-2:] for r in rows] == [f"{i:02d}" for i in range(10)]
    live = await run(bus, tmp_path, "SELECT count(*) AS n FROM live")
    assert json.loads(live) == {"n": 6}  # 4-9: the group's pending ones and those past it
    assert json.loads(await run(bus, tmp_path, "SELECT count(*) AS n FROM records", group="other")) == {"n": 10}
    only_acme = await run(bus, tmp_path, "SELECT DISTINCT tenant FROM records", tenant="acme")
    assert [json.loads(line) for line in only_acme.splitlines()] == [{"tenant": "acme"}]


async def test_formats(bus: BusProbe, tmp_path: Path) -> None:
    await archive_and_tail(bus, tmp_path)
    lines = [json.loads(line) for line in (await run(bus, tmp_path, DENIES)).splitlines()]
    assert lines == [
        {"tenant": "acme", "rule": "r0", "denies": 2},
        {"tenant": "globex", "rule": "r1", "denies": 2},
    ]
    table = (await run(bus, tmp_path, DENIES, fmt="table")).splitlines()
    assert table[0].split() == ["tenant", "rule", "denies"] and set(table[1]) <= {"-", " "}
    assert table[2].split() == ["acme", "r0", "2"] and table[-1] == "(2 rows)"
    assert list(csv.reader(io.StringIO(await run(bus, tmp_path, DENIES, fmt="csv")))) == [
        ["tenant", "rule", "denies"],
        ["acme", "r0", "2"],
        ["globex", "r1", "2"],
    ]
    timed = json.loads(await run(bus, tmp_path, "SELECT time, day FROM records ORDER BY time LIMIT 1"))
    assert timed == {"time": "2023-11-14T22:13:20+00:00", "day": "2023-11-14"}


def test_csv_cells_are_not_formulas_and_table_cells_are_cut() -> None:
    out = io.StringIO()
    write_rows(["reason"], [("=HYPERLINK(1)",)], out, "csv")
    assert out.getvalue().splitlines()[1] == '"\'=HYPERLINK(1)"'
    out = io.StringIO()
    write_rows(["input", "n"], [("x" * 200, 1), (None, None)], out, "table")
    lines = out.getvalue().splitlines()
    assert len(lines[2].split()[0]) == CELL_CHARS and lines[2].split()[0].endswith("…")


async def test_mistakes_are_one_line(bus: BusProbe, tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match=r"the query failed: .*nosuch"):
        await run(bus, None, "SELECT * FROM nosuch")
    with pytest.raises(ArchiveError, match="no archive at"):
        await run(bus, tmp_path / "missing", "SELECT 1")
    with pytest.raises(ConfigError, match="give the SQL"):
        await run(bus, None, "  ")


@pytest.mark.system
def test_the_command_line(tmp_path: Path, redis_url: str) -> None:
    ArchiveTarget(str(tmp_path)).write(rows_by_partition([entry(i, at_ms=AT_MS + i) for i in range(3)])[0])
    done = run_hookbus(
        "audit", "query", "SELECT count(*) AS n FROM records", "--archive", str(tmp_path), "--redis-url", redis_url
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].strip() == "n" and done.stdout.splitlines()[2].strip() == "3"
    refused = run_hookbus(
        "audit",
        "query",
        "COPY records TO '/tmp/x.csv'",
        "--no-redis",
        "--format",
        "csv",
        HOOKBUS_ARCHIVE_DIR=str(tmp_path),
    )
    assert refused.returncode == 1 and refused.stderr.startswith("hookbus: refused:")
    assert len(refused.stderr.strip().splitlines()) == 1
    alone = run_hookbus("audit", "query", "SELECT 1", "--no-redis")
    assert alone.returncode == 1 and "--no-redis needs an archive" in alone.stderr
