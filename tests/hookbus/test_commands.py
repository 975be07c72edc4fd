"""The ``hookbus`` sub-commands (:mod:`hookbus.commands`): their output, messages and exit codes.

``policy check`` and ``emit`` run in-process through :func:`hookbus.cli.main` (``emit`` in a
worker thread when the live gateway runs on this test's loop). Commands that set up logging
or connect to Redis run as real ``python -m hookbus`` children with a clean environment.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bus.policy.loading import load_policy
from bus.runtime.settings import Tokens
from hookbus.cli import main
from hookbus.platform.redis_server import free_port
from tests.conftest import DENY_RM, BusProbe, logged_session, run_hookbus

GOOD = """
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"]}
        - {type: command, command: "echo checked"}
  Stop:
    - hooks: [{type: command, command: "true"}]
"""
BAD = """
hooks:
  Stop:
    - hooks:
        - {type: command, command: "", timeout: 0}
"""


@pytest.fixture(autouse=True)
def _no_hookbus_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process commands read ``HOOKBUS_*`` variables: none of the caller's."""
    for name in ("HOOKBUS_URL", "HOOKBUS_TOKEN", "HOOKBUS_REDIS_URL", "HOOKBUS_CONFIG", "HOOKBUS_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)


def run(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``hookbus ARGS`` in-process: (exit code, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- policy check ------------------------------------------------------------------------------------


def test_policy_check_ok_prints_a_summary(
    write_policy: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_policy(GOOD)
    code, out, err = run("policy", "check", str(path), capsys=capsys)
    revision = load_policy([path]).revision
    assert (code, err) == (0, "")
    assert out == f"ok: 3 handlers on 2 events (revision {revision})\n"


def test_policy_check_layers_several_files(
    write_policy: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_policy(GOOD, "base.yaml")
    extra = write_policy(
        '{"hooks": {"Notification": [{"hooks": [{"type": "command", "command": "true"}]}]}}', "extra.json"
    )
    code, out, _ = run("policy", "check", str(base), str(extra), capsys=capsys)
    assert code == 0
    assert out.startswith("ok: 4 handlers on 3 events ")


def test_policy_check_reports_every_problem_with_its_line(
    write_policy: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_policy(BAD)
    code, out, err = run("policy", "check", str(path), capsys=capsys)
    assert (code, out) == (1, "")
    assert sorted(err.splitlines()) == [
        f"{path}:5: hooks.Stop[0].hooks[0].command: must not be empty",
        f"{path}:5: hooks.Stop[0].hooks[0].timeout: must be > 0",
    ]


def test_policy_check_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    code, out, err = run("policy", "check", str(missing), capsys=capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"{missing}: cannot read: ") and err.count("\n") == 1


@pytest.mark.system
def test_policy_check_imports_function_handlers(
    write_policy: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_policy('hooks: {Stop: [{hooks: [{type: function, function: "no_such_module_q:check"}]}]}\n')
    code, _, err = run("policy", "check", str(path), capsys=capsys)
    assert code == 1
    assert "cannot import 'no_such_module_q:check': ModuleNotFoundError" in err


def test_policy_check_notes_and_strict(write_policy: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = write_policy("permissions: {allow: []}\n" + GOOD)
    note = f"{path}:1: ignored Claude Code settings key 'permissions'"
    code, out, _ = run("policy", "check", str(path), capsys=capsys)
    assert code == 0
    assert out.splitlines()[0] == f"note: {note}"
    code, out, err = run("policy", "check", "--strict", str(path), capsys=capsys)
    assert (code, out, err) == (1, "", f"{note} (an error under --strict)\n")


# -- emit ----------------------------------------------------------------------------------------------


@pytest.mark.system
def test_emit_to_no_gateway_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run(
        "emit", "PreToolUse", "--tool", "Bash", "--input", '{"command": "ls"}', "--url", url, capsys=capsys
    )
    assert (code, out) == (1, "")
    assert err.startswith(f"hookbus: cannot reach the gateway at {url}/v1/hooks: ")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_emit_to_a_gateway_that_never_answers_gives_up_at_the_timeout(
    silent_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run("emit", "Stop", "--url", f"http://127.0.0.1:{silent_port}", "--timeout", "0.3", capsys=capsys)
    assert code == 1
    assert err.startswith(f"hookbus: cannot reach the gateway at http://127.0.0.1:{silent_port}/v1/hooks: ")


@pytest.mark.system
def test_emit_with_bad_input_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run("emit", "PreToolUse", "--tool", "Bash", "--input", "{command: ls}", capsys=capsys)
    assert (code, out) == (1, "")
    assert err.startswith("hookbus: --input is not valid JSON: ")


async def test_emit_prints_the_decision_of_a_live_gateway(
    platform: Callable[..., Any], bus: BusProbe, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with platform(DENY_RM) as p:
        monkeypatch.setenv("HOOKBUS_URL", p.url)  # no --url: the environment's
        code = await asyncio.to_thread(
            main, ["emit", "PreToolUse", "--tool", "Bash", "--session", "s-emit", "--input", '{"command": "rm -rf /"}']
        )
        stop_code = await asyncio.to_thread(
            main,
            [
                "emit",
                "Stop",
                "--url",
                f"{p.url}/v1/hooks",
                "--session",
                "s-emit",
                "--input",
                '{"stop_hook_active": true}',
            ],
        )
        records = await logged_session(bus, "s-emit", count=2)
    out, err = capsys.readouterr()
    assert (code, stop_code, err) == (0, 0, "")
    head, _, rest = out.partition("\n")
    denied = records[0]
    assert head == f"HTTP 200  outcome=decided  event_id={denied.event_id}"
    decision, _, second = rest.partition("\n}\n")
    assert json.loads(decision + "}")["hookSpecificOutput"]["permissionDecision"] == "deny"
    # No handler on Stop: the gateway records it and answers at once.
    assert second == f"HTTP 200  outcome=recorded  event_id={records[1].event_id}\n{{}}\n"
    sent = json.loads(denied.payload)
    assert sent["tool_name"] == "Bash" and sent["tool_input"] == {"command": "rm -rf /"}
    assert sent["cwd"] and sent["transcript_path"] == ""
    assert json.loads(records[1].payload)["stop_hook_active"] is True  # other events: the input's fields


async def test_emit_sends_the_token_and_fails_on_a_refusal(
    platform: Callable[..., Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with platform(DENY_RM, tokens=Tokens.parse("acme:tok-a")) as p:
        refused = await asyncio.to_thread(main, ["emit", "Stop", "--url", p.url])
        refused_out, _ = capsys.readouterr()
        monkeypatch.setenv("HOOKBUS_TOKEN", "tok-a")
        accepted = await asyncio.to_thread(main, ["emit", "Stop", "--url", p.url])
        accepted_out, _ = capsys.readouterr()
    assert refused == 1 and refused_out.startswith("HTTP 401  outcome=-  event_id=-\n")
    assert json.loads(refused_out.partition("\n")[2])["error"] == "unauthorized"
    assert accepted == 0 and accepted_out.startswith("HTTP 200  outcome=recorded  event_id=")


async def test_emit_accepts_the_hooks_url_with_a_trailing_slash(
    platform: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    async with platform(DENY_RM) as p:
        code = await asyncio.to_thread(main, ["emit", "Stop", "--url", f"{p.url}/v1/hooks/"])
    assert (code, capsys.readouterr().out.split("  ")[0]) == (0, "HTTP 200")


# -- commands that need Redis ------------------------------------------------------------------------


@pytest.mark.system
def test_tail_without_redis_says_where_it_looked(tmp_path: Path) -> None:
    done = run_hookbus("tail", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"hookbus: no Redis: nothing runs from {tmp_path / '.hookbus'}; pass --state-dir "
        "(where 'hookbus up' runs) or --redis-url\n"
    )


@pytest.mark.system
def test_tail_with_redis_down_is_a_one_line_error(tmp_path: Path) -> None:
    port = free_port()
    done = run_hookbus("tail", "--redis-url", f"redis://127.0.0.1:{port}/0", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"hookbus: redis unavailable at redis://127.0.0.1:{port}/0: ")
    assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.system
def test_a_role_without_redis_is_told_how_to_name_one(write_policy: Callable[..., Path], tmp_path: Path) -> None:
    done = run_hookbus("gateway", "--config", str(write_policy(GOOD)), "--port", str(free_port()), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "hookbus: no Redis: pass --redis-url or set HOOKBUS_REDIS_URL (or use 'hookbus up')\n"


@pytest.mark.system
def test_a_role_with_no_policy_warns_that_every_event_gets_no_opinion(tmp_path: Path) -> None:
    done = run_hookbus("dispatcher", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "hookbus: warning: no policy (no --config and no HOOKBUS_CONFIG): every event will get no opinion",
        "hookbus: no Redis: pass --redis-url or set HOOKBUS_REDIS_URL (or use 'hookbus up')",
    ]


def test_a_role_with_a_bad_policy_lists_its_problems(
    write_policy: Callable[..., Path], tmp_path: Path, redis_url: str
) -> None:
    path = write_policy(BAD)
    done = run_hookbus("dispatcher", "--redis-url", redis_url, cwd=tmp_path, HOOKBUS_CONFIG=str(path))
    assert done.returncode == 1
    assert sorted(done.stderr.splitlines()) == [
        f"{path}:5: hooks.Stop[0].hooks[0].command: must not be empty",
        f"{path}:5: hooks.Stop[0].hooks[0].timeout: must be > 0",
    ]


@pytest.mark.system
def test_a_bad_environment_variable_is_named(tmp_path: Path) -> None:
    done = run_hookbus("gateway", cwd=tmp_path, HOOKBUS_PORT="eighty")
    assert (done.returncode, done.stderr) == (1, "hookbus: HOOKBUS_PORT='eighty' is not a valid int\n")


@pytest.mark.system
def test_status_and_stop_with_nothing_running(tmp_path: Path) -> None:
    state = tmp_path / "state"
    status = run_hookbus("status", "--state-dir", str(state), cwd=tmp_path)
    assert (status.returncode, status.stdout) == (1, f"hookbus: nothing running from {state}\n")
    stop = run_hookbus("stop", "--state-dir", str(state), cwd=tmp_path)
    assert (stop.returncode, stop.stdout) == (0, f"hookbus: nothing running from {state}\n")


# -- the parser --------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["policy"], ["emit"], ["tail", "--count", "many"]])
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("usage: hookbus")
