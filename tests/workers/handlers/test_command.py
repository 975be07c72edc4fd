"""End-to-end tests of :mod:`workers.handlers.command` with real ``/bin/sh`` subprocesses.

Nothing here synchronises with fixed sleeps: waits are conditions polled under a deadline.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.placeholders import lookup, render_exec, render_shell
from bus.policy.schema import CommandHandler
from workers.handlers.command import KILL_GRACE_S, hook_env, run_command, run_process

pytestmark = pytest.mark.system  # starts processes (or servers) itself

PRE = "PreToolUse"


def handler(command: str, **fields: Any) -> CommandHandler:
    return CommandHandler(type="command", command=command, **fields)


def event_input(tmp_path: Path, **fields: Any) -> dict[str, Any]:
    base = {
        "session_id": "sess-1",
        "cwd": str(tmp_path),
        "hook_event_name": PRE,
        "tool_name": "Bash",
        "tool_input": {"command": "ls", "file_path": "a b.txt"},
        "effort": {"level": "high"},
    }
    return base | fields


async def run(
    tmp_path: Path,
    command: str | CommandHandler,
    event: str = PRE,
    *,
    hook_input: dict[str, Any] | None = None,
    timeout_s: float = 5.0,
    **kw: Any,
) -> HandlerResult:
    hook_input = event_input(tmp_path) if hook_input is None else hook_input
    h = handler(command) if isinstance(command, str) else command
    kw.setdefault("extra_env", {"OUT": str(tmp_path / "out")})
    return await run_command(
        h, event, json.dumps(hook_input).encode(), hook_input, timeout_s=timeout_s, event_id="evt-1", **kw
    )


async def wait_until(cond: Callable[[], bool], deadline_s: float = 3.0) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < end, "condition not met before the deadline"
        await asyncio.sleep(0.01)


def dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # an orphan killed but not yet reaped by init is a zombie: dead too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


DENY = (
    '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}'
)
ALLOW = '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'


# --- exit-code paths, end to end -------------------------------------------------------------


async def test_exit0_json_deny(tmp_path: Path) -> None:
    result = await run(tmp_path, f"printf '%s' '{DENY}'")
    assert result.outcome is Outcome.OK
    assert result.output is not None and result.output["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert result.handler_type == "command" and 0 < result.duration_s < 2


async def test_exit0_plain_text_on_user_prompt_submit(tmp_path: Path) -> None:
    hook_input = event_input(tmp_path, hook_event_name="UserPromptSubmit", prompt="hi")
    result = await run(tmp_path, "echo 'remember the style guide'", "UserPromptSubmit", hook_input=hook_input)
    assert result.outcome is Outcome.OK
    assert result.text is not None and result.text.strip() == "remember the style guide"


async def test_exit2_stderr_blocks(tmp_path: Path) -> None:
    result = await run(tmp_path, "echo 'rm is forbidden here' >&2; exit 2")
    assert result.outcome is Outcome.BLOCK
    assert result.reason is not None and "rm is forbidden here" in result.reason


async def test_exit2_blocks_even_with_stdout_allow(tmp_path: Path) -> None:
    result = await run(tmp_path, f"printf '%s' '{ALLOW}'; echo 'nope' >&2; exit 2")
    assert result.outcome is Outcome.BLOCK


async def test_exit1_with_valid_json_is_honoured(tmp_path: Path) -> None:
    result = await run(tmp_path, f"printf '%s' '{DENY}'; exit 1")
    assert result.outcome is Outcome.OK
    assert result.output is not None and result.output["hookSpecificOutput"]["permissionDecision"] == "deny"


async def test_exit1_with_text_is_a_non_blocking_error(tmp_path: Path) -> None:
    result = await run(tmp_path, "echo 'something broke' >&2; echo text; exit 1")
    assert result.outcome is Outcome.ERROR


async def test_exit127_missing_script_is_a_non_blocking_error(tmp_path: Path) -> None:
    result = await run(tmp_path, str(tmp_path / "no-such-hook.sh"))
    assert result.outcome is Outcome.ERROR


async def test_stdin_received_exactly(tmp_path: Path) -> None:
    hook_input = event_input(tmp_path, tool_input={"command": "echo 'é ✓' \"q\"\n"})
    payload = json.dumps(hook_input, ensure_ascii=False).encode() + b"\n"
    h = handler("""printf '{"systemMessage":"%s"}' "$(base64 | tr -d '\\n')" """)
    result = await run_command(h, PRE, payload, hook_input, timeout_s=5, event_id="e")
    assert result.output is not None
    assert base64.b64decode(result.output["systemMessage"]) == payload


# --- exec form and spawn failures -------------------------------------------------------------


async def test_exec_form_substitutes_verbatim_without_a_shell(tmp_path: Path) -> None:
    value = "x; touch pwned $(id) `id` 'q' \"d\""
    hook_input = event_input(tmp_path, hook_event_name="UserPromptSubmit", prompt=value)
    h = handler("printf", args=["%s|%s|%s", "${prompt}", "${CLAUDE_PROJECT_DIR}", "$HOME"])
    result = await run(tmp_path, h, "UserPromptSubmit", hook_input=hook_input)
    assert result.outcome is Outcome.OK and result.text == f"{value}|{tmp_path}|$HOME"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: handler("hookbus-no-such-binary", args=[]), "command not found: hookbus-no-such-binary"),
        (lambda p: handler(str(p / "plain.txt"), args=["x"]), "permission denied"),
    ],
)
async def test_exec_spawn_failure_is_an_error(tmp_path: Path, make: Any, reason: str) -> None:
    (tmp_path / "plain.txt").write_text("#!/bin/sh\nexit 0\n")
    result = await run(tmp_path, make(tmp_path))
    assert result.outcome is Outcome.ERROR and result.reason is not None and reason in result.reason
    assert result.handler_type == "command"


async def test_nul_byte_in_a_value_is_spelled_out_not_an_error(tmp_path: Path) -> None:
    hook_input = event_input(tmp_path, tool_input={"file_path": "a\x00b"})
    result = await run(tmp_path, 'printf %s ${tool_input.file_path} > "$OUT"', hook_input=hook_input)
    assert result.outcome is Outcome.OK
    assert (tmp_path / "out").read_text() == "a\\0b"


async def test_powershell_without_pwsh_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = await run(tmp_path, handler("Write-Output hi", shell="powershell"))
    assert result.outcome is Outcome.ERROR and result.reason is not None and "pwsh" in result.reason


# --- environment and working directory ----------------------------------------------------------


async def test_env_vars_set_and_secrets_not_leaked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKBUS_TOKENS", "s3cr3t-token")
    monkeypatch.setenv("HOOKBUS_REDIS_URL", "redis://s3cr3t")
    monkeypatch.setenv("CLAUDE_CODE_SESSION_ID", "stale")
    await run(tmp_path, 'env > "$OUT"; pwd >> "$OUT"')
    lines = (tmp_path / "out").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    assert env["CLAUDE_PROJECT_DIR"] == str(tmp_path)
    assert env["CLAUDE_CODE_SESSION_ID"] == "sess-1"
    assert env["HOOKBUS_EVENT_ID"] == "evt-1"
    assert env["CLAUDE_EFFORT"] == "high" and env["CLAUDECODE"] == "1"
    assert env["OUT"] == str(tmp_path / "out")
    assert "HOOKBUS_TOKENS" not in env and "HOOKBUS_REDIS_URL" not in env
    assert "s3cr3t" not in "\n".join(lines)
    assert lines[-1] == str(tmp_path)  # ran in the event's cwd, which exists here


async def test_cwd_missing_on_this_machine_falls_back(tmp_path: Path) -> None:
    hook_input = event_input(tmp_path, cwd="/nonexistent/agent/project")
    await run(tmp_path, 'pwd > "$OUT"; echo "$CLAUDE_PROJECT_DIR" >> "$OUT"', hook_input=hook_input)
    assert (tmp_path / "out").read_text().splitlines() == [os.getcwd(), "/nonexistent/agent/project"]


def test_hook_env_drops_stale_event_vars() -> None:
    base = {"PATH": "/bin", "CLAUDE_PROJECT_DIR": "/old", "CLAUDE_EFFORT": "max", "HOOKBUS_X": "1"}
    env = hook_env({"session_id": "s"}, "e", {"HOOKBUS_MINE": "ok"}, base=base)
    assert env == {
        "PATH": "/bin",
        "CLAUDE_CODE_SESSION_ID": "s",
        "CLAUDECODE": "1",
        "HOOKBUS_EVENT_ID": "e",
        "HOOKBUS_MINE": "ok",
    }


def test_hook_env_is_an_allowlist() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/root",
        "ANTHROPIC_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "x",
        "TEAM_TOKEN": "t",
        "HOOKBUS_TOKENS": "a:b",
    }
    env = hook_env({"session_id": "s"}, "e", base=base)
    assert "ANTHROPIC_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env and "TEAM_TOKEN" not in env
    assert (env["PATH"], env["HOME"]) == ("/bin", "/root")
    allowed = hook_env(
        {"session_id": "s"}, "e", base=base, allowed=["TEAM_TOKEN", "HOOKBUS_TOKENS"], literal={"STAGE": "prod"}
    )
    assert (allowed["TEAM_TOKEN"], allowed["STAGE"]) == ("t", "prod")
    assert "HOOKBUS_TOKENS" not in allowed  # the service's own settings never reach a hook


async def test_a_command_hook_sees_only_allowed_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("TEAM_TOKEN", "team")
    await run(tmp_path, 'env > "$OUT"')
    seen = (tmp_path / "out").read_text()
    assert "sk-ant-secret" not in seen and "TEAM_TOKEN" not in seen


# --- placeholders and injection -----------------------------------------------------------------

TEMPLATES = {
    "unquoted": ("printf '%s' ${tool_input.file_path} > \"$OUT\"", "{}"),
    "double-quoted": ('printf \'%s\' "<${tool_input.file_path}>" > "$OUT"', "<{}>"),
    "single-quoted": ("printf '%s' '<${args.file_path}>' > \"$OUT\"", "<{}>"),
    "seed-001 audit": ("echo '[AUDIT] bash: ${args.file_path}' > \"$OUT\"", "[AUDIT] bash: {}\n"),
    "command substitution": ("printf '%s' \"$(printf '%s' ${args.file_path})\" > \"$OUT\"", "{}"),
    "backticks": ("printf '%s' \"`printf '%s' ${args.file_path}`\" > \"$OUT\"", "{}"),
}
VALUES = [
    "x; touch {p}",
    "$(touch {p})",
    "`touch {p}`",
    "a\ntouch {p}",
    "'; touch {p}; '",
    '"; touch {p}; "',
    "*",
    "${{IFS}}$(touch {p})&&touch {p}|touch {p}",
]


@pytest.mark.parametrize("template", TEMPLATES, ids=list(TEMPLATES))
@pytest.mark.parametrize("raw", VALUES)
async def test_injection_is_inert(tmp_path: Path, template: str, raw: str) -> None:
    command, expected = TEMPLATES[template]
    value = raw.format(p=tmp_path / "pwned")
    hook_input = event_input(tmp_path, tool_input={"file_path": value})
    await run(tmp_path, command, hook_input=hook_input)
    assert not (tmp_path / "pwned").exists()
    assert (tmp_path / "out").read_text() == expected.format(value)


async def test_missing_path_is_one_empty_argument_and_shell_vars_are_left_alone(tmp_path: Path) -> None:
    await run(tmp_path, 'set -- ${tool_input.nope}; echo "$# [$1] ${OUT:+set} \\${args.command}" > "$OUT"')
    assert (tmp_path / "out").read_text() == "1 [] set ${args.command}\n"


def test_lookup_values_and_aliases() -> None:
    edits = [{"n": 1, "ok": True, "x": None}]
    data = {"tool_name": "Edit", "tool_input": {"edits": edits, "o": {"a": [1, "é"]}}}
    assert lookup("tool", data) == "Edit" and lookup("args.edits.0.n", data) == "1"
    assert lookup("args.edits.0.ok", data) == "true" and lookup("args.edits.0.x", data) == ""
    assert lookup("tool_input.o", data) == '{"a":[1,"é"]}' and lookup("args.edits.7", data) == ""
    assert lookup("args", {"args": {"path": "p"}}) == '{"path":"p"}'  # a top-level ``args`` key wins over the alias


def test_render_shell_quoting_contexts() -> None:
    data = {"tool_input": {"p": "v"}, "cwd": "/w"}
    template = "a ${args.p} \"${args.p}\" '${args.p}' ${CLAUDE_PROJECT_DIR} $HOME # ${args.p}"
    script, env = render_shell(template, data)
    ref = "${HOOKBUS_V0}"
    assert script == f'a "{ref}" "{ref}" \'\'"{ref}"\'\' "${{CLAUDE_PROJECT_DIR}}" $HOME # ${{args.p}}'
    assert env == {"HOOKBUS_V0": "v"}
    pwsh = render_shell("echo ${cwd}", data, powershell=True)
    assert pwsh == ("echo ${env:HOOKBUS_V0}", {"HOOKBUS_V0": "/w"})


def test_render_exec_only_substitutes_project_dir_in_the_program() -> None:
    data = {"tool_input": {"p": "a b"}, "cwd": "/w"}
    argv = render_exec("${CLAUDE_PROJECT_DIR}/${args.p}", ["--f=${args.p}", "${args.q}", "$HOME"], data)
    assert argv == ["/w/${args.p}", "--f=a b", "", "$HOME"]


# --- processes: timeouts, cancellation, output, leaks ---------------------------------------------

SPAWN_TREE = 'sleep 100 & echo $! > "$OUT"; echo $$ >> "$OUT"; '


@pytest.mark.parametrize(
    "prefix",
    ["", "trap 'echo TERM > \"$OUT.t\"; exit 3' TERM; ", "trap '' TERM; "],
    ids=["plain", "handles-TERM", "ignores-TERM"],
)
async def test_timeout_kills_the_whole_group(tmp_path: Path, prefix: str) -> None:
    started = time.monotonic()
    result = await run(tmp_path, prefix + SPAWN_TREE + "sleep 100; sleep 100", timeout_s=0.5)
    assert result.outcome is Outcome.TIMEOUT and result.reason == "timed out after 0.5s"
    assert time.monotonic() - started < 0.5 + KILL_GRACE_S + 0.5
    assert len(pids(tmp_path / "out")) == 2
    await wait_until(lambda: all(dead(pid) for pid in pids(tmp_path / "out")))
    if "exit 3" in prefix:  # SIGTERM comes first, so a hook can clean up
        await wait_until(lambda: (tmp_path / "out.t").exists())


async def test_cancellation_kills_the_whole_group(tmp_path: Path) -> None:
    task = asyncio.ensure_future(run(tmp_path, SPAWN_TREE + "sleep 100", timeout_s=30))
    await wait_until(lambda: len(pids(tmp_path / "out")) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: all(dead(pid) for pid in pids(tmp_path / "out")))


async def test_background_leftovers_killed_unless_detached(tmp_path: Path) -> None:
    detach = """setsid sh -c 'echo $$ > "$OUT.d"; exec sleep 100' >/dev/null 2>&1 </dev/null &"""
    wait_detached = 'until [ -s "$OUT.d" ]; do sleep 0.01; done'
    script = f'sleep 100 & echo $! > "$OUT"; {detach} {wait_detached}; echo $$ >> "$OUT"'
    started = time.monotonic()
    await run(tmp_path, script)
    assert time.monotonic() - started < 1.0
    (leftover, leader), (detached,) = pids(tmp_path / "out"), pids(tmp_path / "out.d")
    try:
        await wait_until(lambda: dead(leftover) and not Path(f"/proc/{leader}").exists())  # leader reaped
        assert not dead(detached)
    finally:
        os.kill(detached, signal.SIGKILL)


async def test_flooding_hook_that_ignores_stdin_does_not_deadlock(tmp_path: Path) -> None:
    hook_input = event_input(tmp_path, tool_input={"content": "z" * (4 << 20)})
    flood = "head -c 3000000 /dev/zero | tr '\\0' a; head -c 3000000 /dev/zero | tr '\\0' b >&2; exit 1"
    started = time.monotonic()
    result = await run(tmp_path, flood, hook_input=hook_input)
    assert result.outcome is Outcome.ERROR and time.monotonic() - started < 2


async def test_large_stdin_round_trip_and_output_cap(tmp_path: Path) -> None:
    payload = os.urandom(3 << 20)
    full = await run_process(
        ["/bin/sh", "-c", "cat; printf x >&2"],
        payload,
        env=dict(os.environ),
        cwd=None,
        timeout_s=5,
        max_output_bytes=8 << 20,
    )
    assert full.stdout == payload.decode("utf-8", errors="replace") and full.returncode == 0
    flood = "cat; head -c 5000 /dev/zero >&2; printf '\\377ok'"
    capped = await run_process(
        ["/bin/sh", "-c", flood], payload, env=dict(os.environ), cwd=None, timeout_s=5, max_output_bytes=100
    )
    assert capped.stdout == payload[:100].decode("utf-8", errors="replace")
    assert capped.stderr == "\0" * 100
    small = await run_process(["/bin/sh", "-c", "printf '\\377ok'"], b"", env={}, cwd=None, timeout_s=5)
    assert small.stdout == "\ufffdok"


async def test_exit2_reason_respects_the_output_cap(tmp_path: Path) -> None:
    result = await run(tmp_path, "head -c 5000 /dev/zero | tr '\\0' b >&2; exit 2", max_output_bytes=100)
    assert result.outcome is Outcome.BLOCK and result.reason is not None
    assert "b" * 100 in result.reason and "b" * 101 not in result.reason


async def test_no_file_descriptor_leaks(tmp_path: Path) -> None:
    await run(tmp_path, "true")  # the loop's own one-time resources (uvloop's child watcher)
    before = len(os.listdir("/proc/self/fd"))
    await run(tmp_path, f"printf '%s' '{DENY}'")
    await run(tmp_path, "sleep 100", timeout_s=0.2)
    await run(tmp_path, handler("hookbus-no-such-binary", args=[]))
    for steps in range(8):  # cancelled while spawning, writing stdin, waiting: always cleaned up
        task = asyncio.ensure_future(run(tmp_path, "sleep 100"))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(os.listdir("/proc/self/fd")) == before


async def test_a_nul_byte_cannot_switch_a_guard_off(tmp_path: Path) -> None:
    guard = 'case ${tool_input.command} in *"rm -rf"*) printf "blocked: %s" ${tool_input.command} >&2; exit 2;; esac'
    hook_input = event_input(tmp_path)
    hook_input["tool_input"] = {"command": "rm -rf /tmp/x\u0000"}
    hook_input["cwd"] = str(tmp_path) + "\u0000"
    result = await run(tmp_path, guard, hook_input=hook_input)
    assert result.outcome is Outcome.BLOCK
    assert "rm -rf /tmp/x\\0" in (result.reason or "")
    exec_form = CommandHandler.model_validate(
        {"type": "command", "command": "sh", "args": ["-c", 'printf %s "$1" > "$OUT"', "x", "${tool_input.command}"]}
    )
    assert (await run(tmp_path, exec_form, hook_input=hook_input)).outcome is Outcome.OK
    assert (tmp_path / "out").read_text() == "rm -rf /tmp/x\\0"
