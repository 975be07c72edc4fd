"""The decision log's hash chains: written by the real settle script, checked by ``hookbus audit verify``.

Records are settled through the dispatcher's :class:`workers.dispatcher.outbox.Outbox` on a real
Redis, in every way an event can be settled (decided, answered first and settled later, claimed
by the gateway, past its deadline, non-blocking, re-delivered), on two partitions. Then the log
is tampered with as someone with write access to Redis could (a record altered, deleted,
reordered; the whole chain rebuilt) and the check must name the record.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from redis.crc import key_slot

from bus.decisionlog.chain import ChainCheck, Link, link_hash, record_digest, view_digest
from bus.decisionlog.parquet import ArchiveTarget
from bus.policy.signing import generate
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.trustedkeys import public_key_text
from bus.stream.partitions import claim_layout
from bus.stream.protocol import LogRecord, Reply, Request, now_ms
from hookbus.audit.archive import Archiver
from hookbus.audit.command import record_json
from hookbus.audit.verify import check_archive, check_file, check_live
from tests.conftest import BusProbe, async_wait_for, run_hookbus
from workers.dispatcher.outbox import Outbox, Settle

DENY = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
TWO = Keyspace("chain:", partitions=2)


async def settle_all(bus: BusProbe, outbox: Outbox, session: str, how: str, command: str = "rm -rf /") -> None:
    """Append one event of ``session`` to its partition's work stream and settle it ``how``."""
    partition = TWO.partition_of(session)
    blocking = how != "recorded"
    request = Request(
        event_id=uuid.uuid4().hex,
        event="PreToolUse" if blocking else "Notification",
        tenant="acme",
        payload=orjson.dumps({"session_id": session, "tool_name": "Bash", "tool_input": {"command": command}}),
        received_ms=now_ms(),
        deadline_ms=now_ms() + (5000 if how != "late" else -1) if blocking else 0,
        reply_to=f"{TWO.prefix}reply:g" if blocking else "",
        token_id="tok_1",
        client_address="127.0.0.1",
    )
    stream = TWO.blocking_stream(partition) if blocking else TWO.events_stream(partition)
    if not await bus.redis.exists(stream):
        await bus.redis.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
    await bus.redis.xadd(stream, request.encode())  # type: ignore[arg-type]
    [[_, [(entry_id, _)]]] = await bus.redis.xreadgroup(DISPATCH_GROUP, "c", {stream: ">"}, count=1)
    reply = Reply(request.event_id, DENY, "deny")
    if how == "answered":  # answered before its record, then settled twice (a re-delivery)
        assert await outbox.answer(request, reply, partition)
    if how == "claimed":
        await bus.redis.set(TWO.outcome(request.event_id, partition), "Gtimeout", px=10_000)
    record = LogRecord(
        event_id=request.event_id,
        event=request.event,
        tenant="acme",
        session_id=session,
        outcome="decided" if blocking else "recorded",
        decision="deny" if blocking else "none",
        output=DENY if blocking else {},
        payload=request.payload,
        received_ms=request.received_ms,
        decided_ms=now_ms(),
        tool_name="Bash",
        token_id="tok_1",
        client_address="127.0.0.1",
    )
    for _ in range(2 if how == "answered" else 1):
        outbox.settle(Settle(stream, entry_id, request, record, reply if blocking else None, 1000, partition=partition))
        await outbox.flushed()


HOW = ("decided", "answered", "claimed", "late", "recorded")
#: Two sessions of each partition.
SESSIONS = [s for p in (0, 1) for s in [f"session-{i}" for i in range(50) if TWO.partition_of(f"session-{i}") == p][:2]]


@pytest.fixture
async def linked(bus: BusProbe) -> list[tuple[str, dict[str, Any]]]:
    """Twenty records on two partitions, settled every way; returns each log's (log id, view) in order."""
    await claim_layout(bus.redis, TWO)
    outbox = Outbox(bus.redis, TWO)
    await outbox.start()
    try:
        for i in range(20):
            await settle_all(bus, outbox, SESSIONS[i % 4], HOW[i % len(HOW)])
    finally:
        await outbox.stop()
    return await views(bus)


async def views(bus: BusProbe) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for partition in TWO.all_partitions:
        for entry_id, fields in await bus.redis.xrange(TWO.decision_log(partition)):
            found.append((entry_id.decode(), record_json(entry_id.decode(), LogRecord.decode(fields))))
    return found


async def live(bus: BusProbe, **options: Any) -> tuple[ChainCheck, int]:
    return await check_live(bus.url, Keyspace("chain:"), **options)


async def rewrite(
    bus: BusProbe, partition: int, change: Callable[[list[tuple[bytes, dict[bytes, bytes]]]], None]
) -> None:
    """Rebuild a partition's log with the same entry ids, its entries' fields changed by ``change``."""
    log = TWO.decision_log(partition)
    entries = [(entry_id, dict(fields)) for entry_id, fields in await bus.redis.xrange(log)]
    change(entries)
    await bus.redis.delete(log)
    for entry_id, fields in entries:
        await bus.redis.xadd(log, fields, id=entry_id)


def parts(views_: list[tuple[str, dict[str, Any]]], partition: int) -> list[tuple[str, dict[str, Any]]]:
    return [(i, v) for i, v in views_ if Link.parse(v["chain"]).partition == partition]  # type: ignore[union-attr]


async def test_every_way_of_settling_links_each_record_once_and_the_chains_hold(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]]
) -> None:
    assert len(linked) == 20  # the answered events were settled twice: still one record, one link
    for partition in TWO.all_partitions:
        links = [Link.parse(v["chain"]) for _, v in parts(linked, partition)]
        assert [link.seq for link in links if link] == list(range(1, len(links) + 1))
        assert await bus.redis.get(TWO.decision_chain(partition)) == f"{len(links)}:{links[-1].hash}".encode()  # type: ignore[union-attr]
    assert {v["outcome"] for _, v in linked} == {"decided", "fail-open", "recorded"}
    check, _ = await live(bus)
    assert check.first_break() is None and check.checked == 20
    # The chain head shares its partition's slot with the log: the settle script takes both.
    assert {key_slot(TWO.decision_chain(p).encode()) == key_slot(TWO.decision_log(p).encode()) for p in (0, 1)} == {
        True
    }


def test_the_hash_is_the_scripts_and_covers_what_readers_see() -> None:
    record = LogRecord("e1", "PreToolUse", "acme", "s", "decided", "deny", DENY, b'{"b": 1, "a": [2]}', 1, 2)
    view = record.to_json()
    assert record_digest(record) == view_digest({**view, "outcome": "fail-open", "log_id": "1-0", "chain": "x"})
    assert view_digest({**view, "decision": "allow"}) != record_digest(record)
    assert view_digest({**view, "input": {"a": [2], "b": 1}, "future_field": None}) == record_digest(record)
    assert link_hash("0" * 40, 0, 1, "d", "decided", "") != link_hash("0" * 40, 0, 1, "d", "fail-open", "timeout")


async def test_a_record_altered_in_redis_is_named(bus: BusProbe, linked: list[tuple[str, dict[str, Any]]]) -> None:
    victim_id, victim = [(i, v) for i, v in parts(linked, 1) if v["decision"] == "deny"][1]

    def allow(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        for entry_id, fields in entries:
            if entry_id.decode() == victim_id:
                fields[b"r"] = fields[b"r"].replace(b'"dec":"deny"', b'"dec":"allow"')

    await rewrite(bus, 1, allow)
    found = (await live(bus))[0].first_break()
    assert found is not None and (found.kind, found.where, found.partition, found.event_id) == (
        "altered",
        victim_id,
        1,
        victim["id"],
    )
    assert "content does not match its hash" in str(found)


async def test_a_record_rehashed_after_altering_it_is_named_by_the_next_one(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]]
) -> None:
    victim_id, victim = next((i, v) for i, v in parts(linked, 0)[1:-1] if v["decision"] == "deny")
    link = Link.parse(victim["chain"])
    assert link is not None
    forged = {**victim, "decision": "allow"}
    new_hash = link_hash(link.prev, 0, link.seq, view_digest(forged), victim["outcome"], victim["fail_open"] or "")

    def rehash(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        for entry_id, fields in entries:
            if entry_id.decode() == victim_id:
                fields[b"r"] = fields[b"r"].replace(b'"dec":"deny"', b'"dec":"allow"')
                fields[b"ch"] = f"0:{link.seq}:{link.prev}:{new_hash}".encode()

    await rewrite(bus, 0, rehash)
    found = (await live(bus))[0].first_break()
    assert found is not None and (found.kind, found.where, found.seq) == ("altered", victim_id, link.seq)
    assert "not the one the next record" in found.detail


async def test_a_deleted_record_is_named_by_the_one_after_it(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]]
) -> None:
    records = parts(linked, 0)
    await bus.redis.xdel(TWO.decision_log(0), records[4][0])
    found = (await live(bus))[0].first_break()
    assert found is not None and (found.kind, found.where, found.partition) == ("deleted", records[5][0], 0)
    assert "seq 5" in found.detail


async def test_the_newest_records_deleted_are_found_from_the_chain_head(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]]
) -> None:
    records = parts(linked, 1)
    await bus.redis.xdel(TWO.decision_log(1), records[-1][0], records[-2][0])
    found = (await live(bus))[0].first_break()
    assert found is not None and (found.kind, found.partition) == ("deleted", 1)
    assert f"names seq {len(records)}, the log ends at seq {len(records) - 2}" in found.detail


async def test_two_records_swapped_are_named_reordered(bus: BusProbe, linked: list[tuple[str, dict[str, Any]]]) -> None:
    records = parts(linked, 0)

    def swap(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        (_, second), (_, third) = entries[1], entries[2]
        entries[1], entries[2] = (entries[1][0], third), (entries[2][0], second)

    await rewrite(bus, 0, swap)
    found = (await live(bus))[0].first_break()
    assert found is not None and (found.kind, found.where, found.seq) == ("reordered", records[2][0], 2)


async def test_an_export_file_is_checked_line_by_line(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    done = await asyncio.to_thread(run_hookbus, "audit", "export", "--redis-url", bus.url, "--key-prefix", "chain:")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 20 and check_file(io.BytesIO(done.stdout.encode())).first_break() is None
    path = tmp_path / "export.jsonl"
    path.write_text(done.stdout)
    ok = await asyncio.to_thread(run_hookbus, "audit", "verify", str(path))
    assert ok.returncode == 0 and "every chain holds: 20 records checked" in ok.stderr
    altered = [
        line.replace('"decision":"deny"', '"decision":"allow"', 1) if n == 7 else line for n, line in enumerate(lines)
    ]
    path.write_text("\n".join(altered) + "\n")
    bad = await asyncio.to_thread(run_hookbus, "audit", "verify", str(path))
    assert (
        bad.returncode == 1
        and f"(line 8) (event {orjson.loads(lines[7])['id']}" in bad.stderr
        and "altered" in bad.stderr
    )
    gone = check_file(io.BytesIO("\n".join(lines[:9] + lines[10:]).encode())).first_break()
    assert gone is not None and gone.kind == "deleted"
    partition = [Link.parse(orjson.loads(line)["chain"]).partition for line in lines]  # type: ignore[union-attr]
    i = next(i for i in range(2, 19) if partition[i] == partition[i + 1])  # two records of one chain, in a row
    moved = check_file(io.BytesIO("\n".join([*lines[:i], lines[i + 1], lines[i], *lines[i + 2 :]]).encode()))
    found = moved.first_break()
    assert found is not None and found.kind == "reordered" and found.where.endswith(f"(line {i + 2})")
    junk = check_file(io.BytesIO(b"\n".join([lines[0].encode(), b"not json", lines[1].encode()]))).first_break()
    assert junk is not None and (junk.kind, junk.where) == ("altered", "line 2")


async def test_signed_checkpoints_catch_a_chain_rebuilt_from_scratch(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    key = tmp_path / "audit.pem"
    public = public_key_text(generate(key)) + "@org"
    check, _ = await live(bus, sign_keyfile=str(key))
    assert check.first_break() is None and await bus.redis.xlen(TWO.chain_checkpoints(0)) == 1
    check, verified = await live(bus, trust=[public])
    assert check.first_break() is None and verified == 2
    # Someone with write access rebuilds partition 0 with a record changed and every hash, and the head, redone.
    victim_id = [i for i, v in parts(linked, 0) if v["decision"] == "deny"][1]

    def rebuild(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        prev = "0" * 40
        for entry_id, fields in entries:
            if entry_id.decode() == victim_id:
                fields[b"r"] = fields[b"r"].replace(b'"dec":"deny"', b'"dec":"allow"')
            view = record_json(entry_id.decode(), LogRecord.decode(fields))
            link = Link.parse(view["chain"])
            assert link is not None
            digest = link_hash(prev, 0, link.seq, view_digest(view), view["outcome"], view["fail_open"] or "")
            fields[b"ch"] = f"0:{link.seq}:{prev}:{digest}".encode()
            prev = digest
        entries_head[:] = [f"{len(entries)}:{prev}"]

    entries_head: list[str] = []
    await rewrite(bus, 0, rebuild)
    await bus.redis.set(TWO.decision_chain(0), entries_head[0])
    assert (await live(bus))[0].first_break() is None  # the chain alone cannot tell
    found = (await live(bus, trust=[public]))[0].first_break()
    assert found is not None and found.kind == "altered" and "checkpoint" in found.detail


async def test_a_checkpoint_not_signed_by_a_trusted_key_is_named(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    public = public_key_text(generate(tmp_path / "audit.pem"))
    other = tmp_path / "other.pem"
    generate(other)
    assert (await live(bus, sign_keyfile=str(other)))[0].first_break() is None
    found = (await live(bus, trust=[public]))[0].first_break()
    assert found is not None and found.where.startswith("checkpoint ") and "not trusted" in found.detail
    await bus.redis.delete(TWO.chain_checkpoints(0), TWO.chain_checkpoints(1))
    await bus.redis.xadd(TWO.chain_checkpoints(1), {"p": 1, "seq": 1, "hash": "ab", "ts": 1, "key": "k", "sig": "AA=="})
    forged = (await live(bus, trust=[public]))[0].first_break()
    assert forged is not None and forged.where.startswith("checkpoint ") and forged.partition is None


async def test_an_archive_is_checked_as_the_log_was(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    archiver = Archiver(bus.url, Keyspace("chain:"), ArchiveTarget(str(tmp_path)), batch=1000, every_s=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(archiver.run(stop))
    try:
        await async_wait_for(lambda: archiver.delivered == 20, timeout_s=20)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    check = check_archive(str(tmp_path))
    assert check.first_break() is None and check.checked == 20
    done = await asyncio.to_thread(run_hookbus, "audit", "verify", "--archive", str(tmp_path))
    assert done.returncode == 0 and "20 records checked" in done.stderr
    # A file rewritten with one decision changed: that record is named.
    [path] = list(tmp_path.rglob("*.parquet"))  # one tenant, one day, one flush
    table = pq.read_table(path)
    decisions = table.column("decision").to_pylist()
    victim = decisions.index("deny")
    decisions[victim] = "allow"
    pq.write_table(table.set_column(table.schema.get_field_index("decision"), "decision", pa.array(decisions)), path)
    found = check_archive(str(tmp_path)).first_break()
    assert found is not None and (found.kind, found.where) == ("altered", table.column("log_id")[victim].as_py())


async def test_a_large_record_is_linked_with_its_digest_made_off_the_loop(bus: BusProbe) -> None:
    await claim_layout(bus.redis, TWO)
    outbox = Outbox(bus.redis, TWO)
    await outbox.start()
    try:
        await settle_all(bus, outbox, SESSIONS[0], "decided")
        await settle_all(bus, outbox, SESSIONS[0], "decided", command="echo " + "x" * (200 << 10))
        await settle_all(bus, outbox, SESSIONS[0], "answered")
    finally:
        await outbox.stop()
    check, _ = await live(bus)
    assert check.first_break() is None and check.partitions == {0: (1, 3)}


async def test_the_command_line_checks_the_live_log_signs_and_says_what_it_found(
    bus: BusProbe, linked: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    key = tmp_path / "audit.pem"
    public = public_key_text(generate(key))
    where = ("--redis-url", bus.url, "--key-prefix", "chain:")
    signed = await asyncio.to_thread(run_hookbus, "audit", "verify", "--live", *where, "--sign", str(key))
    assert signed.returncode == 0 and "every chain holds: 20 records checked (partition 0: seq 1-" in signed.stderr
    trusted = await asyncio.to_thread(run_hookbus, "audit", "verify", "--live", *where, "--trust", public)
    assert trusted.returncode == 0 and "2 signed checkpoints verified" in trusted.stderr
    await bus.redis.xdel(TWO.decision_log(1), parts(linked, 1)[2][0])
    broken = await asyncio.to_thread(run_hookbus, "audit", "verify", "--live", *where)
    assert broken.returncode == 1 and broken.stderr.startswith(f"hookbus: record {parts(linked, 1)[3][0]} (event ")
    assert "partition 1, seq 4) deleted: the records before it are missing (seq 3)" in broken.stderr
    misused = await asyncio.to_thread(run_hookbus, "audit", "verify", str(tmp_path / "x.jsonl"), "--trust", public)
    assert misused.returncode != 0 and "--trust and --sign need --live" in misused.stderr
    assert "Traceback" not in misused.stderr
