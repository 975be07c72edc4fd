"""A read's rows made column by column (:mod:`bus.decisionlog.archivebatch`) equal those made one by one."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

import orjson
import pytest

from bus.decisionlog.archivebatch import _STRUCT, Unlike, columns
from bus.decisionlog.archiverows import _META_KEYS, Rows, add_entries, add_read
from bus.decisionlog.parquet import file_name
from tests.bus.decisionlog.archive_records import AT_MS, DAY_MS, fields_of, log_record


def varied(i: int) -> tuple[str, dict[bytes, bytes]]:
    """Record ``i`` of 4 tenants over two days, some with a sender, a reason that needs escaping,
    facts (a key the schema does not name), a deny decided by two handlers, and a chain link."""
    record = log_record(i, tenant=("acme", "globex", "a/b", "initech")[i // 2 % 4], at_ms=AT_MS + (i % 2) * DAY_MS + i)
    if i % 3 == 0:
        record.token_id, record.client_address = "tk_ops", "10.0.0.7"
    if i % 5 == 0:
        record.reason = "é ' \" \\ \u2028 =cmd"
        record.decision = "deny"
        record.hooks.append({"id": "second", "decided": True, "n": 1.5})
    if i % 7 == 0:
        record.facts = ["pushed"]
    record.shadow = [{"id": "s", "would": "deny"}] if i % 4 == 0 else []
    return f"{AT_MS + i}-{i}", {**fields_of(record), b"ch": f"0:{i}:{i:040x}:{i + 1:040x}".encode()}


def flat(fields: Mapping[bytes, bytes]) -> list[bytes]:
    return list(itertools.chain.from_iterable(fields.items()))


def made(entries: Sequence[tuple[str, dict[bytes, bytes]]]) -> tuple[dict[tuple[str, str], Rows], list[str]]:
    parts: dict[tuple[str, str], Rows] = {}
    return parts, add_read(parts, [log_id.encode() for log_id, _ in entries], [flat(f) for _, f in entries])


def one_by_one(entries: Sequence[tuple[str, dict[bytes, bytes]]]) -> dict[tuple[str, str], Rows]:
    parts: dict[tuple[str, str], Rows] = {}
    assert add_entries(parts, entries) == []
    return parts


def assert_same(a: Mapping[tuple[str, str], Rows], b: Mapping[tuple[str, str], Rows]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].table().to_pylist() == b[key].table().to_pylist(), key
        assert a[key].keys == b[key].keys and file_name(a[key]) == file_name(b[key])


def test_the_json_keys_read_are_those_the_schema_names() -> None:
    assert set(_STRUCT) == _META_KEYS


def test_a_read_made_column_by_column_equals_it_made_row_by_row() -> None:
    entries = [varied(i) for i in range(60)]
    parts, skipped = made(entries)
    assert skipped == []
    assert_same(parts, one_by_one(entries))
    assert {len(rows) for rows in parts.values()} == {7, 8}  # 4 tenants x 2 days
    row = next(r for r in parts[("2023-11-14", "acme")].table().to_pylist() if r["id"] == "ev-acme-00000")
    assert row["rule"] == "allow-reads,second" and row["token_id"] == "tk_ops" and row["reason"].startswith("é")
    assert orjson.loads(row["extra"]) == {"facts": ["pushed"], "ch": f"0:0:{0:040x}:{1:040x}"}


def test_reads_not_alike_are_made_row_by_row() -> None:
    entries = [varied(i) for i in range(6)]
    del entries[2][1][b"ch"]  # an entry without a link (written before the chain)
    entries[4][1][b"in"] = b"\xff not utf-8"
    parts, skipped = made(entries)
    assert skipped == []
    assert_same(parts, one_by_one(entries))
    bad = [("1-0", {b"r": b"{", b"in": b"", b"o": b"", b"fo": b""}), varied(7)]
    with pytest.raises(Unlike):
        columns([b"1-0", b"2-0"], [flat(f) for _, f in bad], _META_KEYS)
    assert made(bad)[1] == ["1-0"]


@pytest.mark.system  # starts a process
def test_a_child_forked_from_another_thread_after_a_read_is_made_runs() -> None:
    # A DuckDB connection left open by a read (one kept per thread) made the next fork with a
    # preexec_fn from another thread crash in the child before it ran (as the embedded Redis starts).
    made([varied(i) for i in range(60)])
    codes: list[int] = []

    def spawn() -> None:
        child = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=lambda: None)
        codes.append(child.wait(timeout=30))

    thread = threading.Thread(target=spawn)
    thread.start()
    thread.join(timeout=60)
    assert codes == [0]
