"""Codex's shell exit codes (:mod:`hookbus.shim_codex`): read from a real rollout file as Codex
0.171.0 writes it, added to the hook input, and made a ``PostToolUseFailure`` by the gateway."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.dialects.codex import EXIT_CODE_FIELD as DIALECT_FIELD
from bus.dialects.codex import SHELL_NAMES, STDIN_TOOL
from hookbus.shim_codex import COMMAND_TOOLS, EXIT_CODE_FIELD, SCAN_BYTES, rollout_exit_code, with_exit_code
from tests.conftest import BusProbe, logged_session
from tests.hookbus.test_shim import BOTH, shim

LOOP_GATE = """hookbus:
  deadlineSeconds: 5
  session:
    loopGate: 2
hooks: {}
"""


def completed(
    call: str, exit_code: object, output: str = "ls: cannot access '/nope': No such file or directory\n"
) -> str:
    """A rollout line of a finished shell command, as Codex writes it (fields in its order)."""
    item = {
        "type": "CommandExecution",
        "id": call,
        "process_id": "65229",
        "command": ["/bin/bash", "-lc", "ls /nope"],
        "cwd": "file:///work",
        "source": "unified_exec_startup",
        "status": "failed" if exit_code else "completed",
        "aggregated_output": output,
        "exit_code": exit_code,
        "duration": {"secs": 0, "nanos": 5490},
    }
    event = {"type": "item_completed", "thread_id": "th", "turn_id": "tu", "item": item}
    line = {"timestamp": "2026-12-07T01:41:42.359Z", "ordinal": 11, "type": "event_msg", "payload": event}
    return json.dumps(line, separators=(",", ":"))


def call_output(call: str) -> str:
    payload = {"type": "function_call_output", "call_id": call, "output": "Process exited with code 2\n"}
    return json.dumps({"type": "response_item", "payload": payload}, separators=(",", ":"))


def post_tool_use(transcript: Path | str, call: str = "call_1", session: str = "s-codex") -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "turn_id": "tu",
            "transcript_path": str(transcript),
            "cwd": "/work",
            "hook_event_name": "PostToolUse",
            "model": "gpt-fake-codex",
            "permission_mode": "bypassPermissions",
            "tool_name": "Bash",
            "tool_input": {"command": "ls /nope"},
            "tool_response": "ls: cannot access '/nope': No such file or directory\n",
            "tool_use_id": call,
        }
    ).encode()


def rollout(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def long_rollout(tmp_path: Path, call: str, exit_code: int, output_bytes: int, *, before: str = "") -> Path:
    """A rollout of ``before`` then ``call``'s completed line with ``output_bytes`` of output,
    written a MiB at a time."""
    head, tail = completed(call, exit_code, output="@@").split("@@")
    path = tmp_path / "rollout.jsonl"
    with path.open("w") as rollout_file:
        rollout_file.write(before + head)
        for written in range(0, output_bytes, 1 << 20):
            rollout_file.write("x" * min(1 << 20, output_bytes - written))
        rollout_file.write(tail + "\n")
    return path


def test_the_field_is_the_one_the_dialect_reads() -> None:
    assert EXIT_CODE_FIELD == DIALECT_FIELD


def test_the_tools_searched_for_are_the_dialects_commands() -> None:
    assert COMMAND_TOOLS == SHELL_NAMES | {STDIN_TOOL}


def test_a_call_of_another_tool_is_not_searched_for(tmp_path: Path) -> None:
    path = rollout(tmp_path, completed("call_2", 2))
    body = json.loads(post_tool_use(path, "call_2"))
    for tool in ("apply_patch", "mcp__fs__read", None):
        other = orjson.dumps({**body, "tool_name": tool})
        assert with_exit_code(other) == other


def test_a_failed_commands_exit_code_is_added_to_the_input(tmp_path: Path) -> None:
    path = rollout(tmp_path, completed("call_1", 0), completed("call_2", 2), call_output("call_2"))
    assert rollout_exit_code(str(path), "call_2") == 2
    assert rollout_exit_code(str(path), "call_1") == 0
    body = post_tool_use(path, "call_2")
    added = json.loads(with_exit_code(body))
    assert added == {EXIT_CODE_FIELD: 2, **json.loads(body)}
    assert json.loads(with_exit_code(post_tool_use(path, "call_1")))[EXIT_CODE_FIELD] == 0
    assert rollout_exit_code(str(path), "call_10") is None  # a prefix of another id is not that id


def test_what_is_not_found_or_not_plain_leaves_the_input_as_it_was(tmp_path: Path) -> None:
    path = rollout(tmp_path, completed("call_1", 2), completed("call_3", None), completed("call_4", 10**40))
    for body in (
        post_tool_use(path, "call_2"),  # not in the rollout
        post_tool_use(path, "call_3"),  # no exit code (null)
        post_tool_use(path, "call_4"),  # a number longer than any exit code
        post_tool_use(tmp_path / "missing.jsonl"),
        post_tool_use("relative.jsonl"),
        post_tool_use(path, 'call_1"'),  # an id that is not a plain token
        post_tool_use(path).replace(b'"PostToolUse"', b'"PreToolUse"'),
        json.dumps({"hook_event_name": "PostToolUse", EXIT_CODE_FIELD: 0, "transcript_path": str(path)}).encode(),
        b"not json PostToolUse",
    ):
        assert with_exit_code(body) == body


def test_a_commands_output_cannot_forge_an_exit_code(tmp_path: Path) -> None:
    # The command printed what a completed item looks like: inside the line its quotes are escaped.
    forged = completed("call_9", 0)
    path = rollout(tmp_path, completed("call_1", 2, output=forged + "\n" + forged))
    assert rollout_exit_code(str(path), "call_9") is None
    assert rollout_exit_code(str(path), "call_1") == 2


def test_only_a_regular_file_is_read_and_no_link_followed(tmp_path: Path) -> None:
    real = rollout(tmp_path, completed("call_1", 2))
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert rollout_exit_code(str(link), "call_1") is None
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert rollout_exit_code(str(fifo), "call_1") is None  # opened without blocking, then refused
    assert rollout_exit_code(str(tmp_path), "call_1") is None


def test_a_large_outputs_exit_code_is_found(tmp_path: Path) -> None:
    path = long_rollout(tmp_path, "call_1", 2, 3 << 20, before=completed("call_0", 0) + "\n")
    assert rollout_exit_code(str(path), "call_1") == 2
    assert rollout_exit_code(str(path), "call_0") == 0
    assert json.loads(with_exit_code(post_tool_use(path, "call_1")))[EXIT_CODE_FIELD] == 2


def test_a_call_with_more_than_a_mib_of_rollout_after_it_is_found(tmp_path: Path) -> None:
    filler = call_output("call_0")
    count = (3 << 20) // len(filler)
    path = rollout(tmp_path, completed("call_1", 2), *[filler] * count, completed("call_2", 3))
    assert rollout_exit_code(str(path), "call_1") == 2
    assert rollout_exit_code(str(path), "call_2") == 3


@pytest.mark.parametrize(("over", "found"), [(0, 2), (1, None)])
def test_the_calls_line_is_read_only_within_the_scanned_end(tmp_path: Path, over: int, found: int | None) -> None:
    before = completed("call_0", 0) + "\n"
    line_bytes = len(completed("call_1", 2, output="")) + 1
    path = long_rollout(tmp_path, "call_1", 2, SCAN_BYTES - line_bytes + over, before=before)
    assert path.stat().st_size == len(before) + SCAN_BYTES + over  # the line: all of the scan, or a byte more
    assert rollout_exit_code(str(path), "call_1") == found
    assert rollout_exit_code(str(path), "call_0") is None  # before the scanned end


def test_every_chunk_boundary_finds_the_same_codes(tmp_path: Path) -> None:
    # Each chunk size puts the reads' boundaries elsewhere: through the id, the item's type,
    # "exit_code":, the digits and the newlines, in turn.
    forged = completed("call_9", 0)
    path = rollout(tmp_path, completed("call_1", 0), completed("call_2", 17, output=forged), call_output("call_2"))
    for chunk_bytes in range(1, path.stat().st_size + 2):
        found = [rollout_exit_code(str(path), call, chunk_bytes=chunk_bytes) for call in ("call_1", "call_2", "call_9")]
        assert found == [0, 17, None], chunk_bytes


@BOTH
async def test_codexs_failed_commands_reach_the_loop_gate_through_the_shim(
    command: list[str], platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    path = rollout(tmp_path, completed("call_1", 2), completed("call_2", 0), completed("call_3", 127))
    session = f"s-codex-{len(command)}"
    next_call = {**json.loads(post_tool_use(path, "call_4", session)), "hook_event_name": "PreToolUse"}
    del next_call["tool_response"]
    async with platform(LOOP_GATE) as p:
        for call in ("call_2", "call_1", "call_3"):
            code, out, err = await shim(
                "--url", p.url, "--agent", "codex", command=command, stdin=post_tool_use(path, call, session)
            )
            assert (code, out) == (0, b"{}\n"), err
        code, out, err = await shim(
            "--url", p.url, "--agent", "codex", command=command, stdin=json.dumps(next_call).encode()
        )
    assert code == 0, err
    gate = json.loads(out)["hookSpecificOutput"]
    assert gate["permissionDecision"] == "deny" and "loop gate" in gate["permissionDecisionReason"], gate
    records = await logged_session(bus, session, count=4)
    assert [(r.event, orjson.loads(r.payload).get("error")) for r in records] == [
        ("PostToolUse", None),
        ("PostToolUseFailure", "Exit code: 2"),
        ("PostToolUseFailure", "Exit code: 127"),
        ("PreToolUse", None),
    ]


@pytest.mark.parametrize("code", [1, -9, 255])
def test_the_dialect_makes_a_non_zero_exit_a_failure_with_a_posttooluse_reply(code: int) -> None:
    from bus.dialects.base import AGENT_EVENT_NAME
    from bus.dialects.codex import CodexCli

    agent_input = json.loads(post_tool_use("/r.jsonl")) | {EXIT_CODE_FIELD: code}
    canonical = CodexCli().to_canonical(agent_input)
    assert canonical["hook_event_name"] == "PostToolUseFailure"
    assert (canonical[AGENT_EVENT_NAME], canonical["error"]) == ("PostToolUse", f"Exit code: {code}")
    for kept in (0, True, "2", None):
        assert CodexCli().to_canonical({**agent_input, EXIT_CODE_FIELD: kept})["hook_event_name"] == "PostToolUse"
    reply = {"decision": "block", "reason": "stop", "hookSpecificOutput": {"additionalContext": "ctx"}}
    assert CodexCli().to_agent("PostToolUseFailure", reply, agent_input) == {
        "decision": "block",
        "reason": "stop",
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "ctx"},
    }
