"""The archive's Parquet files (:mod:`bus.decisionlog.parquet`): rows, partitions, durable and idempotent writes."""

from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path

import orjson
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from bus.decisionlog.parquet import SCHEMA, ArchiveTarget, day_of, file_name, rows_by_partition
from bus.errors import ArchiveError, ConfigError
from bus.stream.protocol import LogRecord
from tests.bus.decisionlog.archive_records import AT_MS, DAY_MS, entry, fields_of, log_record

pytestmark = pytest.mark.unit


def test_a_row_holds_what_an_export_shows_of_the_record() -> None:
    record = log_record(3, decision="deny", rule="no-rm")
    record.agent_id, record.agent_type, record.tool_use_id = "sub-1", "explorer", "toolu_1"
    record.reason, record.trace_id, record.fail_open = "no rm -rf", "ab" * 16, "hook_error"
    record.token_id, record.client_address = "tk_1", "10.0.0.7"
    record.masked = [{"pointer": "/tool_input/command", "detector": "github"}]
    record.shadow = [{"id": "shadowed", "decision": "deny"}]
    fields = fields_of(record)
    parts, skipped = rows_by_partition([("1700000003005-0", fields)])
    assert skipped == []
    [(key, rows)] = parts.items()
    assert key == (day_of(record.received_ms), "acme")
    row = rows.table().to_pylist()[0]
    shown = {"log_id": "1700000003005-0", **LogRecord.decode(fields).to_json()}
    for name in SCHEMA.names:
        if name in ("hooks", "shadow", "masked", "output", "input"):
            assert orjson.loads(row[name]) == shown[name], name
        elif name == "time":
            assert row[name] == datetime.datetime.fromtimestamp(record.received_ms / 1000, datetime.UTC)
        elif name == "rule":
            assert row[name] == "no-rm"
        elif name != "extra":
            assert row[name] == shown[name], name
    assert row["extra"] is None


def test_fields_the_schema_does_not_name_are_kept_in_extra() -> None:
    log_id, fields = entry(1)
    meta = orjson.loads(fields[b"r"])
    meta["chain"] = "tk_1"
    parts, _ = rows_by_partition([(log_id, {**fields, b"r": orjson.dumps(meta), b"h": b"abc"})])
    [rows] = parts.values()
    assert orjson.loads(rows.table().to_pylist()[0]["extra"]) == {"chain": "tk_1", "h": "abc"}


def test_entries_that_are_not_records_are_skipped() -> None:
    parts, skipped = rows_by_partition([("1-0", {b"x": b"y"}), ("2-0", {b"r": b"{", b"in": b""}), entry(1)])
    assert skipped == ["1-0", "2-0"] and sum(len(rows.keys) for rows in parts.values()) == 1


def test_files_are_partitioned_by_day_and_tenant(tmp_path: Path) -> None:
    target = ArchiveTarget(str(tmp_path / "archive"))
    entries = [entry(1), entry(2, tenant="a/b"), entry(3, at_ms=AT_MS + DAY_MS)]
    written = target.write(rows_by_partition(entries)[0])
    relative = sorted(str(Path(w.path).relative_to(tmp_path / "archive").parent) for w in written)
    assert relative == ["day=2023-11-14/tenant=a%2Fb", "day=2023-11-14/tenant=acme", "day=2023-11-15/tenant=acme"]
    table = pq.read_table(written[0].path)
    assert table.schema.names == SCHEMA.names and table.num_rows == 1
    assert pq.ParquetFile(written[0].path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_the_same_records_make_the_same_file_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = ArchiveTarget(str(tmp_path))
    parts = rows_by_partition([entry(i) for i in range(5)])[0]
    [first] = target.write(parts)
    assert Path(first.path).name == file_name(next(iter(parts.values())))
    [again] = target.write(parts)
    assert again.path == first.path and not again.replaced and again.rows == 5
    assert len(list(tmp_path.rglob("*.parquet"))) == 1
    with open(first.path, "r+b") as file:  # cut short, as by a crash on a filesystem that lost the tail
        file.truncate(100)
    with caplog.at_level(logging.WARNING):
        [fixed] = target.write(parts)
    assert fixed.replaced and pq.read_table(fixed.path).num_rows == 5
    assert "is not a whole Parquet file (cut short or corrupt): writing it again" in caplog.text


def test_no_path_under_the_root_is_followed_through_a_symbolic_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "archive"
    root.mkdir()
    (root / f"day={day_of(AT_MS)}").symlink_to(elsewhere)
    with pytest.raises(ArchiveError, match="symbolic link"):
        ArchiveTarget(str(root)).write(rows_by_partition([entry(1)])[0])
    assert list(elsewhere.iterdir()) == []


def test_partial_files_of_a_crash_are_removed(tmp_path: Path) -> None:
    folder = tmp_path / "day=2023-11-14" / "tenant=acme"
    folder.mkdir(parents=True)
    (folder / ".part-abc.parquet.tmp").write_bytes(b"PAR1 cut")
    (folder / "part-keep.parquet").write_bytes(b"x")
    assert ArchiveTarget(str(tmp_path)).remove_partials() == [str(folder / ".part-abc.parquet.tmp")]
    assert sorted(p.name for p in folder.iterdir()) == ["part-keep.parquet"]


def test_a_filesystem_uri_is_written_through_pyarrow(tmp_path: Path) -> None:
    target = ArchiveTarget(f"file://{tmp_path}/archive")
    assert target.local  # a local folder by URI takes the local path (synced, no links followed)
    mock = ArchiveTarget("mock:///bucket/archive")
    assert not mock.local
    assert mock.fs is not None
    [written] = mock.write(rows_by_partition([entry(1), entry(2)])[0])
    assert written.path.startswith("bucket/archive/day=2023-11-14/tenant=acme/part-")
    with mock.fs.open_input_file(written.path) as file:
        assert pq.read_table(file).num_rows == 2
    [again] = mock.write(rows_by_partition([entry(1), entry(2)])[0])
    assert again.path == written.path and not again.replaced
    assert [i.path for i in mock.fs.get_file_info(pafs.FileSelector("bucket", recursive=True)) if i.is_file] == [
        written.path
    ]


def test_bad_targets_are_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"not a folder|cannot create"):
        ArchiveTarget(str(tmp_path / "file"))
    with pytest.raises(ConfigError, match="not a filesystem pyarrow can write"):
        ArchiveTarget("nosuch://x/y")
    assert os.path.isdir(ArchiveTarget(str(tmp_path / "new" / "deep")).root)


def test_a_days_files_are_compacted_into_one_with_each_record_once(tmp_path: Path) -> None:
    target = ArchiveTarget(str(tmp_path))
    for first in (0, 10, 20):  # three flushes of one day and tenant, and one of the next day
        target.write(rows_by_partition([entry(i) for i in range(first, first + 10)])[0])
    target.write(rows_by_partition([entry(99, at_ms=AT_MS + DAY_MS)])[0])
    day = tmp_path / f"day={day_of(AT_MS)}" / "tenant=acme"
    assert len(list(day.glob("*.parquet"))) == 3
    assert target.compact(day_of(AT_MS)) == []  # only days before the one given
    [merged] = target.compact(day_of(AT_MS + DAY_MS))
    assert [Path(merged.path)] == list(day.glob("*.parquet")) and merged.rows == 30
    table = pq.read_table(merged.path)
    assert table["received_ms"].to_pylist() == sorted(table["received_ms"].to_pylist())
    assert len(list((tmp_path / f"day={day_of(AT_MS + DAY_MS)}" / "tenant=acme").glob("*.parquet"))) == 1
    # A crash after the merged file was in place and before the others were removed: compacted again, the same file.
    target.write(rows_by_partition([entry(i) for i in range(10, 20)])[0])
    [again] = target.compact(day_of(AT_MS + DAY_MS))
    assert again.path == merged.path and again.rows == 30 and list(day.glob("*.parquet")) == [Path(merged.path)]
    assert target.compact(day_of(AT_MS + DAY_MS)) == []  # one file: nothing to do


def test_records_a_remote_target_holds_already_are_not_written_again() -> None:
    # A pyarrow filesystem other than the local one (here its in-memory one, by URI): the records
    # read again after a restart are looked up in its files as in a local folder's.
    target = ArchiveTarget("mock:///bucket/archive")
    first, _ = rows_by_partition([entry(1), entry(2)])
    [written] = target.write(first)
    again, _ = rows_by_partition([entry(1), entry(2), entry(3)])
    rest = target.unwritten(again)
    [(key, rows)] = rest.items()
    assert key == (day_of(AT_MS), "acme")
    assert rows.table()["id"].to_pylist() == [log_record(3).event_id]
    [second] = target.write(rest)
    assert second.path != written.path
    assert target.unwritten(again) == {}
