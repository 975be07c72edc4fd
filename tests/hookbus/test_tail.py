"""``hookbus tail`` (:mod:`hookbus.tail`): the decision log as lines, from a real Redis.

Records are written with XADD of :class:`bus.stream.protocol.LogRecord` entries, as the dispatchers
write them. :func:`tail` runs in-process for what it prints; the command line runs as a real
``python -m hookbus tail`` child for its flags, its exit and a reader that leaves early.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.decisionlog.audit import RecordFilter
from bus.redis.keys import Keyspace
from bus.stream.partitions import claim_layout
from bus.stream.protocol import LogRecord
from hookbus.platform.redis_server import EmbeddedRedis
from hookbus.tail import format_record, tail
from tests.conftest import BusProbe, async_wait_for, clean_env, frozen_during, run_hookbus

AT_MS = 1_700_000_000_000  # 22:13:20 UTC
DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "no rm -rf\nsecond line",
    }
}


def record(
    event_id: str,
    *,
    session: str = "s-1",
    tenant: str = "default",
    event: str = "PreToolUse",
    decision: str = "deny",
    output: dict[str, Any] | None = None,
    tool: str = "Bash",
    outcome: str = "decided",
    fail_open: str = "",
    latency_ms: int = 12,
    **more: Any,
) -> LogRecord:
    hook_input = {
        "hook_event_name": event,
        "session_id": session,
        "tool_name": tool,
        "tool_input": {"command": "rm -rf /"},
    }
    return LogRecord(
        event_id=event_id,
        event=event,
        tenant=tenant,
        session_id=session,
        outcome=outcome,
        decision=decision,
        output=DENY if output is None else output,
        payload=orjson.dumps(hook_input),
        received_ms=AT_MS,
        decided_ms=AT_MS + latency_ms,
        tool_name=tool,
        fail_open=fail_open,
        **more,
    )


async def write(bus: BusProbe, *records: LogRecord | dict[str, bytes], keys: Keyspace | None = None) -> None:
    stream = (keys or bus.keys).decision_log()
    for entry in records:
        await bus.redis.xadd(stream, entry.encode() if isinstance(entry, LogRecord) else entry)  # type: ignore[arg-type]


def stamp(ms: int = AT_MS) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


async def run_tail(bus: BusProbe, capsys: pytest.CaptureFixture[str], **options: Any) -> tuple[list[str], str]:
    """Run :func:`tail` on the suite's Redis until it returns; (stdout lines, stderr)."""
    async with asyncio.timeout(10):
        await tail(bus.url, options.pop("keys", bus.keys), **options)
    out, err = capsys.readouterr()
    return out.splitlines(), err


# -- one line per record ---------------------------------------------------------------------------


def test_a_line_says_when_which_agent_who_what_decision_outcome_latency_and_why() -> None:
    line = format_record(record("e1", session="0123456789abcdef-long", tenant="acme"))
    assert line == f"{stamp()} claude acme/0123456789ab PreToolUse(Bash) -> deny [decided, 12 ms] no rm -rf ..."
    line = format_record(record("e1", agent="gemini"))
    assert line.startswith(f"{stamp()} gemini default/s-1 PreToolUse(Bash) -> deny")


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ({"decision": "block", "reason": "keep going"}, "keep going"),
        ({"continue": False, "stopReason": "stopped by policy"}, "stopped by policy"),
        ({"systemMessage": "just so you know"}, "just so you know"),
        ({"reason": "  ", "systemMessage": "blank reasons are skipped"}, "blank reasons are skipped"),
        ({"reason": "x" * 200}, "x" * 160 + " ..."),
    ],
)
def test_the_reason_is_the_first_that_says_something(output: dict[str, Any], reason: str) -> None:
    line = format_record(record("e1", event="Stop", tool="", decision="block", output=output))
    assert line == f"{stamp()} claude default/s-1 Stop -> block [decided, 12 ms] {reason}"


def test_a_line_names_the_sessions_facts() -> None:
    line = format_record(record("e1", facts=["private_data", "untrusted_content"]))
    assert line.endswith("no rm -rf ... | facts: private_data, untrusted_content")


def test_no_reason_no_trailing_text() -> None:
    assert format_record(record("e1", decision="none", output={})).endswith("-> none [decided, 12 ms]")


def test_fail_open_outcomes_say_why() -> None:
    timed_out = format_record(record("e1", decision="none", output={}, outcome="fail-open", fail_open="timeout"))
    assert timed_out.endswith("-> none [fail-open: timeout, 12 ms]")
    hook_error = format_record(record("e1", decision="allow", output={}, fail_open="hook_error"))
    assert hook_error.endswith("-> allow [decided, fail-open: hook_error, 12 ms]")


def test_shadow_decisions_and_context_follow_the_line() -> None:
    context = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "\nfleet rules\n!"}}
    line = format_record(
        record(
            "e1",
            event="UserPromptSubmit",
            tool="",
            decision="none",
            output=context,
            shadow=[{"decision": "deny"}, {"decision": "none"}],
        )
    )
    assert line == (
        f"{stamp()} claude default/s-1 UserPromptSubmit -> none [decided, 12 ms]"
        " | shadow: would deny | shadow: no opinion | context: fleet rules ..."
    )


# -- tail() ------------------------------------------------------------------------------------------


async def test_from_start_prints_the_retained_log_up_to_count(
    bus: BusProbe, capsys: pytest.CaptureFixture[str]
) -> None:
    await write(bus, record("e1", session="s-a"), record("e2", session="s-b"), record("e3", session="s-c"))
    lines, err = await run_tail(bus, capsys, from_start=True, count=2)
    assert err == ""
    assert lines == [format_record(record("e1", session="s-a")), format_record(record("e2", session="s-b"))]


async def test_json_lines_are_the_records(bus: BusProbe, capsys: pytest.CaptureFixture[str]) -> None:
    written = [record("e1"), record("e2", event="Stop", tool="", decision="block", output={"decision": "block"})]
    await write(bus, *written)
    lines, _ = await run_tail(bus, capsys, from_start=True, count=2, as_json=True)
    assert [json.loads(line) for line in lines] == [r.to_json() for r in written]
    assert json.loads(lines[0])["input"]["tool_input"] == {"command": "rm -rf /"}


async def test_malformed_entries_are_skipped_and_said_on_stderr(
    bus: BusProbe, capsys: pytest.CaptureFixture[str]
) -> None:
    await write(bus, {"r": b"not json", "in": b"{}"}, record("e2"))
    lines, err = await run_tail(bus, capsys, from_start=True, count=1)
    assert lines == [format_record(record("e2"))]
    assert err.startswith("# skipped ") and "malformed decision-log entry" in err


async def test_filters_pick_the_records_and_count_counts_only_those(
    bus: BusProbe, capsys: pytest.CaptureFixture[str]
) -> None:
    await write(
        bus,
        record("e1", session="alpha-1", tenant="acme"),
        record("e2", session="beta-1", tenant="acme", decision="allow", output={}),
        record("e3", session="alpha-2", tenant="beta", event="Stop", decision="block", output={}),
        record("e4", session="alpha-3", tenant="acme", decision="allow", output={}),
    )
    filters = RecordFilter.of(sessions=["alpha"], tenants=["acme, beta"], decisions=["allow", "block"], events=None)
    lines, _ = await run_tail(bus, capsys, from_start=True, count=2, as_json=True, filters=filters)
    assert [json.loads(line)["id"] for line in lines] == ["e3", "e4"]


async def test_without_from_start_only_new_records_are_printed(
    bus: BusProbe, capsys: pytest.CaptureFixture[str]
) -> None:
    await write(bus, record("old"))
    following = asyncio.create_task(tail(bus.url, bus.keys, count=1, as_json=True))
    written = 0

    async def printed() -> bool:
        nonlocal written
        if await blocked_readers(bus) or written:  # it reads from the end of the log now: add to it
            written += 1
            await write(bus, record(f"new-{written}"))
        return following.done()

    try:
        await async_wait_for(printed, timeout_s=10)
    finally:
        following.cancel()
    lines, _ = capsys.readouterr()
    assert [json.loads(line)["id"] for line in lines.splitlines()] == ["new-1"]


async def blocked_readers(bus: BusProbe) -> int:
    return sum(1 for c in await bus.redis.client_list() if c["cmd"] == "xread" and "b" in c["flags"])


async def _readers_blocked(bus: BusProbe, count: int) -> bool:
    blocked = await blocked_readers(bus)
    assert blocked <= count, f"{blocked} blocking reads, expected at most {count}"
    return blocked == count


FOUR = Keyspace(partitions=4)


async def test_from_start_merges_the_partitions_of_the_bus_in_id_order(
    bus: BusProbe, capsys: pytest.CaptureFixture[str]
) -> None:
    await claim_layout(bus.redis, FOUR)  # what the first gateway or dispatcher records
    # (partition, ms): partitions 1 and 3 share an id; partition 2 stays empty.
    for n, (partition, ms) in enumerate([(3, 4), (0, 1), (1, 2), (3, 5), (0, 9), (1, 4)]):
        await bus.redis.xadd(
            FOUR.decision_log(partition),
            record(f"e{n}").encode(),  # type: ignore[arg-type]
            id=f"{AT_MS + ms}-0",
        )
    lines, err = await run_tail(bus, capsys, from_start=True, count=6, as_json=True)  # the CLI's keys: 1 partition
    assert err == ""
    assert [json.loads(line)["id"] for line in lines] == ["e1", "e2", "e5", "e0", "e3", "e4"]


async def test_every_partition_is_followed_live(bus: BusProbe, capsys: pytest.CaptureFixture[str]) -> None:
    await claim_layout(bus.redis, FOUR)
    for partition in range(4):
        await bus.redis.xadd(FOUR.decision_log(partition), record(f"old-{partition}").encode())  # type: ignore[arg-type]
    following = asyncio.create_task(tail(bus.url, bus.keys, count=8, as_json=True))
    try:
        # One blocking read per partition; they start one by one, so wait for the fourth.
        await async_wait_for(lambda: _readers_blocked(bus, 4), timeout_s=10)
        for n, partition in enumerate([2, 0, 3, 3, 1, 0, 2, 1]):
            await bus.redis.xadd(FOUR.decision_log(partition), record(f"new-{n}-p{partition}").encode())  # type: ignore[arg-type]
        async with asyncio.timeout(10):
            await following
    finally:
        following.cancel()
    printed = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    assert sorted(printed) == sorted(f"new-{n}-p{p}" for n, p in enumerate([2, 0, 3, 3, 1, 0, 2, 1]))
    for partition in range(4):  # each partition's records in the order they were written
        mine = [event_id for event_id in printed if event_id.endswith(f"-p{partition}")]
        assert mine == sorted(mine, key=lambda event_id: int(event_id.split("-")[1]))


async def test_another_key_prefix_is_another_log(bus: BusProbe, capsys: pytest.CaptureFixture[str]) -> None:
    other = Keyspace("fleet-b:")
    await write(bus, record("mine"))
    await write(bus, record("theirs"), keys=other)
    lines, _ = await run_tail(bus, capsys, keys=other, from_start=True, count=1, as_json=True)
    assert [json.loads(line)["id"] for line in lines] == ["theirs"]


# -- the command line --------------------------------------------------------------------------------


async def test_the_command_prints_lines_and_stops_at_count(bus: BusProbe, tmp_path: Path) -> None:
    await write(
        bus, record("e1", session="s-a", tenant="acme"), record("e2", session="s-b", agent="codex"), record("e3")
    )
    done = await asyncio.to_thread(
        run_hookbus, "tail", "--redis-url", bus.url, "--from-start", "--count", "2", cwd=tmp_path, TZ="UTC"
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "22:13:20 claude acme/s-a PreToolUse(Bash) -> deny [decided, 12 ms] no rm -rf ...",
        "22:13:20 codex default/s-b PreToolUse(Bash) -> deny [decided, 12 ms] no rm -rf ...",
    ]


async def test_the_command_filters_by_agent(bus: BusProbe, tmp_path: Path) -> None:
    await write(
        bus,
        record("e1"),
        record("e2", agent="gemini"),
        record("e3", agent="qwen"),
        record("e4", agent="sdk"),
        record("e5", agent="gemini"),
    )
    done = await asyncio.to_thread(
        run_hookbus,
        "tail",
        "--redis-url",
        bus.url,
        "--from-start",
        "--count",
        "3",
        "--json",
        "--agent",
        "Gemini",
        "--agent=sdk",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["id"], r["agent"]) for r in printed] == [("e2", "gemini"), ("e4", "sdk"), ("e5", "gemini")]


async def test_the_command_takes_filters_json_and_the_prefix_from_flags_or_env(bus: BusProbe, tmp_path: Path) -> None:
    fleet = Keyspace("fleet-b:")
    await write(bus, record("e1", session="s-a"), record("e2", session="s-b"), keys=fleet)
    await write(bus, record("default-prefix", session="s-b"))
    by_flag = await asyncio.to_thread(
        run_hookbus,
        "tail",
        "--redis-url",
        bus.url,
        "--key-prefix",
        "fleet-b:",
        "--from-start",
        "--count",
        "1",
        "--json",
        "--session",
        "s-b",
        cwd=tmp_path,
    )
    by_env = await asyncio.to_thread(
        run_hookbus,
        "tail",
        "--from-start",
        "--count",
        "1",
        "--json",
        "--session=s-b",
        cwd=tmp_path,
        HOOKBUS_REDIS_URL=bus.url,
        HOOKBUS_KEY_PREFIX="fleet-b:",
    )
    for done in (by_flag, by_env):
        assert done.returncode == 0, done.stderr
        assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == ["e2"]


async def test_the_command_finds_the_redis_of_hookbus_up_in_the_state_folder(
    bus: BusProbe, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    # What `hookbus up` leaves in its state folder: the embedded Redis's socket (here: the suite's).
    for state in (tmp_path / ".hookbus", tmp_path / "elsewhere"):
        (state / "redis").mkdir(parents=True)
        (state / "redis" / "redis.sock").symlink_to(redis_server.socket_path)
    await write(bus, record("e1"))
    from_cwd = await asyncio.to_thread(run_hookbus, "tail", "--from-start", "--count", "1", "--json", cwd=tmp_path)
    by_flag = await asyncio.to_thread(
        run_hookbus,
        "tail",
        "--state-dir",
        str(tmp_path / "elsewhere"),
        "--from-start",
        "--count",
        "1",
        "--json",
        cwd=Path("/"),
    )
    for done in (from_cwd, by_flag):
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["id"] == "e1"


async def test_a_reader_that_leaves_early_is_not_an_error(bus: BusProbe, tmp_path: Path) -> None:
    # More than a pipe buffer of lines: tail is still writing when `head -1` has gone.
    async with bus.redis.pipeline(transaction=False) as pipe:
        for n in range(3000):
            pipe.xadd(bus.keys.decision_log(), record(f"e{n}").encode())  # type: ignore[arg-type]
        await pipe.execute()
    code, first, err = await asyncio.to_thread(read_one_line_and_leave, bus.url, tmp_path)
    assert b"PreToolUse(Bash) -> deny" in first
    assert code == 0, err
    assert b"Traceback" not in err and b"Exception ignored" not in err, err


def read_one_line_and_leave(redis_url: str, cwd: Path) -> tuple[int, bytes, bytes]:
    """``hookbus tail --from-start | head -1``: (tail's exit code, the line read, tail's stderr)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hookbus", "tail", "--redis-url", redis_url, "--from-start"],
        cwd=cwd,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # the reader leaves
        err = process.stderr.read()
        return process.wait(timeout=30), first, err
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


async def test_a_redis_that_stops_answering_is_an_error_not_a_silent_wait(
    private_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """Frozen mid-follow: tail says so and exits 1 instead of waiting forever."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookbus",
        "tail",
        "--redis-url",
        private_redis.url,
        cwd=tmp_path,
        env=clean_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with frozen_during(private_redis, "xread"):
            _, err = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 1
    assert err.decode().startswith(f"hookbus: redis unavailable at {private_redis.url}: Timeout"), err


# -- the same filter as every other reader ---------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        {"decisions": ["fail-open"]},
        {"decisions": ["decided"]},
        {"decisions": ["allow,recorded"]},
        {"decisions": ["none"], "tenants": ["acme"]},
        {"sessions": ["alpha"], "events": ["PreToolUse", "Stop"]},
        {"agents": ["GEMINI,sdk"]},
        {"agents": ["claude"], "tenants": ["acme"]},
    ],
)
async def test_tail_and_audit_export_pass_the_same_records(
    bus: BusProbe, capsys: pytest.CaptureFixture[str], given: dict[str, list[str]]
) -> None:
    from bus.decisionlog.audit import Window
    from hookbus.audit.command import export

    await write(
        bus,
        record("e1", session="alpha-1", tenant="acme"),
        record("e2", decision="none", output={}, outcome="fail-open", fail_open="timeout"),
        record(
            "e3",
            session="alpha-2",
            tenant="acme",
            decision="none",
            output={},
            outcome="fail-open",
            fail_open="redis_unavailable",
            agent="gemini",
        ),
        record("e4", session="alpha-3", event="Stop", decision="none", output={}, outcome="recorded", agent="sdk"),
        record("e5", tenant="acme", decision="allow", output={}, outcome="decided", fail_open="hook_error"),
    )
    passes = RecordFilter.of(None, **given)
    following = asyncio.create_task(tail(bus.url, bus.keys, from_start=True, as_json=True, filters=passes))
    try:  # the retained log printed, it follows the log: all it passes is out
        await async_wait_for(lambda: blocked_readers(bus), timeout_s=10)
    finally:
        following.cancel()
    tailed = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    out = io.StringIO()
    await export(bus.url, bus.keys, Window(), passes, out)
    assert tailed == [json.loads(line)["id"] for line in out.getvalue().splitlines()]
    expected = {
        "decisions=['fail-open']": ["e2", "e3"],
        "decisions=['decided']": ["e1", "e5"],
        "decisions=['allow,recorded']": ["e4", "e5"],
        "decisions=['none'], tenants=['acme']": ["e3"],
        "sessions=['alpha'], events=['PreToolUse', 'Stop']": ["e1", "e3", "e4"],
        "agents=['GEMINI,sdk']": ["e3", "e4"],
        "agents=['claude'], tenants=['acme']": ["e1", "e5"],
    }
    assert tailed == expected[", ".join(f"{k}={v}" for k, v in given.items())]


@pytest.mark.parametrize("argv", [["tail"], ["audit", "export"]])
def test_the_agent_option_names_every_dialect(argv: list[str]) -> None:
    from bus.dialects import DIALECTS
    from hookbus.cli import build_parser

    parser = build_parser()
    command = parser
    for name in argv:  # down the sub-command parsers
        (actions,) = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        command = actions.choices[name]
    (option,) = [a for a in command._actions if "--agent" in a.option_strings]
    assert option.help is not None and f"({', '.join(DIALECTS)})" in option.help
    assert parser.parse_args([*argv, "--agent", "gemini", "--agent=sdk,codex"]).agent == ["gemini", "sdk,codex"]
