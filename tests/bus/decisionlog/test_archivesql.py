"""SQL over the archive (:mod:`bus.decisionlog.archivesql`): the view, read-only refusals, one tenant's scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.decisionlog.archivesql import ReadOnlyQuery, archive_files, view_rows
from bus.decisionlog.parquet import ArchiveTarget, rows_by_partition
from bus.errors import ArchiveError
from tests.bus.decisionlog.archive_records import AT_MS, DAY_MS, entry

pytestmark = pytest.mark.unit

WEEK_MS = 7 * DAY_MS
DENIES_PER_RULE_PER_WEEK = """
    SELECT date_trunc('week', day)::DATE AS week, rule, count(*) AS denies
    FROM records WHERE tenant = 'acme' AND decision = 'deny'
    GROUP BY ALL ORDER BY week, rule
"""


def archive(root: Path) -> list[tuple[str, object]]:
    """Two tenants over three weeks: acme denies by no-rm (weekly 2, 1, 0) and no-curl; globex a deny a week."""
    entries: list[tuple[str, object]] = []
    plan = [
        (0, "acme", "deny", "no-rm"),
        (1, "acme", "deny", "no-rm"),
        (2, "acme", "allow", "allow-reads"),
        (3, "globex", "deny", "no-rm"),
        (WEEK_MS, "acme", "deny", "no-rm"),
        (WEEK_MS + 1, "acme", "deny", "no-curl"),
        (WEEK_MS + 2, "globex", "deny", "no-rm"),
        (2 * WEEK_MS, "acme", "allow", "allow-reads"),
    ]
    for i, (offset, tenant, decision, rule) in enumerate(plan):
        entries.append(entry(i, tenant=tenant, decision=decision, rule=rule, at_ms=AT_MS + offset))
    ArchiveTarget(str(root)).write(rows_by_partition(entries)[0])  # type: ignore[arg-type]
    return entries


def answer(db: ReadOnlyQuery, sql: str) -> list[tuple[object, ...]]:
    _, rows = db.run(sql)
    return list(rows)


def test_denies_per_rule_per_week(tmp_path: Path) -> None:
    archive(tmp_path)
    with ReadOnlyQuery(archive_files(str(tmp_path))) as db:
        found = [(str(week), rule, n) for week, rule, n in answer(db, DENIES_PER_RULE_PER_WEEK)]
    assert found == [("2023-11-13", "no-rm", 2), ("2023-11-20", "no-curl", 1), ("2023-11-20", "no-rm", 1)]


def test_the_tail_adds_what_the_archive_lacks_each_record_once(tmp_path: Path) -> None:
    entries = archive(tmp_path)
    later = [entry(100 + i, at_ms=AT_MS + 2 * WEEK_MS + 10 + i) for i in range(3)]
    tail = view_rows([*entries[-2:], *later])  # type: ignore[list-item]  # two written, not yet acknowledged
    with ReadOnlyQuery(archive_files(str(tmp_path)), tail) as db:
        assert answer(db, "SELECT count(*), count(DISTINCT id) FROM records") == [(11, 11)]
        assert answer(db, "SELECT count(*) FROM live") == [(5,)]
        assert answer(db, "SELECT count(*) FROM archived") == [(8,)]
    with ReadOnlyQuery([], tail) as db:  # no archive yet: Redis alone
        assert answer(db, "SELECT count(*) FROM records") == [(5,)]


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT * FROM records) TO '{out}/copy.csv'",
        "COPY records TO '{out}/copy.parquet' (FORMAT parquet)",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM glob('/etc/*')",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SELECT * FROM read_parquet('https://example.com/x.parquet')",
        "ATTACH '{out}/other.duckdb' AS other",
        "SET enable_external_access = true",
        "SET allowed_paths = ['/etc/passwd']",
        "RESET lock_configuration",
        "CREATE TABLE kept AS SELECT 1",
        "DROP VIEW records",
        "EXPORT DATABASE '{out}/dump'",
    ],
)
def test_sql_cannot_write_files_reach_the_network_or_unlock_itself(tmp_path: Path, sql: str) -> None:
    archive(tmp_path / "archive")
    out = tmp_path / "out"
    out.mkdir()
    with ReadOnlyQuery(archive_files(str(tmp_path / "archive"))) as db:
        with pytest.raises(ArchiveError) as refused:
            answer(db, sql.format(out=out))
        assert "\n" not in str(refused.value)
        assert answer(db, "SELECT count(*) FROM records") == [(8,)]  # still answering
    assert list(out.iterdir()) == []


def test_a_tenant_sees_only_its_own_records_whatever_the_sql(tmp_path: Path) -> None:
    entries = archive(tmp_path)
    globex_file = next(p for p in archive_files(str(tmp_path)) if "tenant=globex" in p)
    tail = view_rows([entry(50, tenant="globex"), entry(51, tenant="acme")], tenant="acme")
    with ReadOnlyQuery(archive_files(str(tmp_path), "acme"), tail) as db:
        assert answer(db, "SELECT DISTINCT tenant FROM records") == [("acme",)]
        assert answer(db, "SELECT count(*) FROM records WHERE tenant = 'globex'") == [(0,)]
        assert answer(db, "SELECT count(*) FROM records") == [(7,)]  # six archived, one in Redis
        for trick in (
            f"SELECT * FROM read_parquet('{globex_file}')",
            f"SELECT * FROM read_parquet('{tmp_path}/**/*.parquet')",
            f"SELECT * FROM read_parquet('{tmp_path}/day=*/tenant=acme/../tenant=globex/*.parquet')",
            f"SELECT * FROM parquet_metadata('{globex_file}')",
        ):
            with pytest.raises(ArchiveError, match="refused"):
                answer(db, trick)
        views = answer(db, "SELECT sql FROM duckdb_views() WHERE NOT internal")
        assert "globex" not in str(views)
    assert len(entries) == 8


def test_a_corrupt_file_is_named_in_one_line(tmp_path: Path) -> None:
    archive(tmp_path)
    broken = archive_files(str(tmp_path))[0]
    Path(broken).write_bytes(b"PAR1 not really")
    with pytest.raises(ArchiveError) as failed:
        with ReadOnlyQuery(archive_files(str(tmp_path))) as db:
            answer(db, "SELECT count(*) FROM records")
    assert broken in str(failed.value) and "\n" not in str(failed.value)


def test_symbolic_links_and_temporary_files_are_not_read(tmp_path: Path) -> None:
    archive(tmp_path)
    folder = Path(archive_files(str(tmp_path))[0]).parent
    (folder / "part-link.parquet").symlink_to("/etc/passwd")
    (folder / ".part-x.parquet.tmp").write_bytes(b"cut")
    (tmp_path / "day=2099-01-01").symlink_to(folder.parent)
    listed = archive_files(str(tmp_path))
    assert len(listed) == 5 and all(Path(p).name.startswith("part-") and "day=2099" not in p for p in listed)
    assert all(not Path(p).name.endswith((".tmp", "link.parquet")) for p in listed)
    with pytest.raises(ArchiveError, match="no archive"):
        archive_files(str(tmp_path / "missing"))
