"""``hookbus hook``, the agent-side command shim, run as the real console command.

Every test starts ``.venv/bin/hookbus hook`` (or ``python -m hookbus hook``) as a subprocess with
a hook input on stdin, exactly as Claude Code runs a command hook, against a live platform,
a dead port, a port that never answers, or a tiny stdlib HTTP server with odd replies. Those
marked ``BOTH`` run it both ways: the console script, and the command the installers write
(``PYTHON -I -S .../hookbus/shim_start.py hook``).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.runtime.settings import Tokens
from hookbus.install.settings_file import default_hook_command
from hookbus.platform.redis_server import free_port
from hookbus.shim import _split, _unchunk, agent_url, hook_url, parse_args
from tests.conftest import DENY_RM, REPO, BusProbe, clean_env, logged_session

NO_DISPATCHER = DENY_RM.replace("2.0", "0.3")
CONSOLE = Path(sys.executable).with_name("hookbus")
COMMAND = [str(CONSOLE)] if CONSOLE.exists() else [sys.executable, "-m", "hookbus"]
INSTALLED = shlex.split(default_hook_command())
BOTH = pytest.mark.parametrize("command", [COMMAND, INSTALLED], ids=["console", "installed"])
HEAVY = (
    "pydantic",
    "redis",
    "httpx",
    "orjson",
    "yaml",
    "uvicorn",
    "starlette",
    "argparse",
    "typing",
    "urllib.request",
    "http.client",
    "ssl",
    "email",
    "hookbus.commands",
    "bus.hooks.models",
)


def bash(command: str, session: str) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "transcript_path": "/t.jsonl",
            "cwd": "/tmp",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
    ).encode()


async def shim(
    *args: str, stdin: bytes, env: dict[str, str] | None = None, command: list[str] = COMMAND
) -> tuple[int, bytes, bytes]:
    """Run ``hookbus hook ARGS`` (``command`` names the shim) with ``stdin``; (exit code, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        *command,
        "hook",
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env or clean_env(),
        cwd=REPO,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 30)
    assert process.returncode is not None
    return process.returncode, out, err


# -- against a live platform ----------------------------------------------------------------


@BOTH
async def test_a_deny_is_passed_through_on_stdout_with_exit_0(
    command: list[str], platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(DENY_RM) as p:
        code, out, err = await shim("--url", p.url, command=command, stdin=bash("rm -rf /", "s-deny"))
    assert code == 0, err
    output = json.loads(out)
    assert output["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert output["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "no rm -rf" in output["hookSpecificOutput"]["permissionDecisionReason"]
    assert out.endswith(b"}\n") and out.count(b"\n") == 1
    assert (await logged_session(bus, "s-deny"))[0].decision == "deny"


async def test_no_opinion_prints_nothing(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(DENY_RM) as p:
        code, out, err = await shim("--url", f"{p.url}/v1/hooks", stdin=bash("ls -la", "s-allow"))
    assert (code, out) == (0, b""), err
    assert (await logged_session(bus, "s-allow"))[0].outcome == "decided"


async def test_url_from_hookbus_url_and_flag_wins(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        code, out, _ = await shim(stdin=bash("rm -rf /", "s-env"), env=clean_env(HOOKBUS_URL=p.url))
        assert code == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
        dead = f"http://127.0.0.1:{free_port()}"
        code, out, _ = await shim(f"--url={p.url}", stdin=bash("rm -rf /", "s-flag"), env=clean_env(HOOKBUS_URL=dead))
        assert code == 0 and b"deny" in out


@BOTH
async def test_token_from_hookbus_token_and_401_handling(command: list[str], platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, tokens=Tokens.parse("fleet:tok-1")) as p:
        code, out, err = await shim("--url", p.url, command=command, stdin=bash("rm -rf /", "s-t"))
        assert (code, out) == (0, b"") and b"401" in err and b"failing open" in err
        code, out, err = await shim("--url", p.url, "--fail-closed", command=command, stdin=bash("rm -rf /", "s-t"))
        assert (code, out) == (2, b"") and b"401" in err and b"failing closed" in err
        wrong = clean_env(HOOKBUS_TOKEN="nope")
        denied = await shim("--url", p.url, "--fail-closed", command=command, stdin=bash("ls", "s-t"), env=wrong)
        assert denied[0] == 2
        code, out, err = await shim(
            "--url", p.url, command=command, stdin=bash("rm -rf /", "s-t"), env=clean_env(HOOKBUS_TOKEN="tok-1")
        )
        assert code == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny", err


@BOTH
async def test_fail_open_outcome_without_dispatchers(command: list[str], platform: Callable[..., Any]) -> None:
    async with platform(NO_DISPATCHER, dispatchers=0) as p:
        code, out, err = await shim("--url", p.url, command=command, stdin=bash("rm -rf /", "s-nd"))
        assert (code, out) == (0, b"") and b"could not decide" in err
        code, out, err = await shim("--url", p.url, "--fail-closed", command=command, stdin=bash("rm -rf /", "s-nd"))
        assert (code, out) == (2, b"") and b"could not decide in time (failing closed)" in err


@BOTH
async def test_input_the_gateway_cannot_judge_is_denied_with_exit_2_even_failing_open(
    command: list[str], platform: Callable[..., Any]
) -> None:
    async with platform(DENY_RM) as p:
        code, out, err = await shim("--url", p.url, command=command, stdin=b"{not json")
        assert code == 2 and b"cannot judge" in err and b"invalid_json" in err
        assert json.loads(out)["decision"] == "block"  # Claude Code's deny of a call, block of anything else
        code, _, err = await shim("--url", p.url, command=command, stdin=b'{"session_id": "x"}')
        assert code == 2 and b"hook_event_name" in err
        # A 400 the gateway keeps (an event no handler decides) still fails open by default.
        stop = b'{"hook_event_name": "Stop", "session_id": 5}'
        assert (await shim("--url", p.url, command=command, stdin=stop))[:2] == (0, b"")
        code, _, err = await shim("--url", p.url, "--fail-closed", command=command, stdin=stop)
        assert code == 2 and b"400" in err


# -- without a gateway ----------------------------------------------------------------------


@pytest.mark.system
@BOTH
async def test_gateway_down_fails_open_or_closed(command: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = await shim("--url", url, command=command, stdin=bash("rm -rf /", "s-down"))
    assert (code, out) == (0, b"") and b"unreachable" in err
    code, out, err = await shim("--url", url, "--fail-closed", command=command, stdin=bash("rm -rf /", "s-down"))
    assert (code, out) == (2, b"") and b"unreachable" in err and b"failing closed" in err


@BOTH
async def test_a_gateway_that_never_answers_is_cut_at_the_timeout(command: list[str], silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}"
    started = time.monotonic()
    code, out, err = await shim("--url", url, "--timeout", "0.3", command=command, stdin=bash("ls", "s-slow"))
    assert (code, out) == (0, b"") and b"within 0.3s" in err
    code, out, err = await shim(
        "--url", url, "--timeout=0.3", "--fail-closed", command=command, stdin=bash("ls", "s-slow")
    )
    assert (code, out) == (2, b"")
    assert time.monotonic() - started < 5


class _Odd(http.server.BaseHTTPRequestHandler):
    """Replies chosen by the request path: chunked JSON, plain text, a JSON array."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = {"/chunked/v1/hooks": b'{"systemMessage": "hi"}', "/text/v1/hooks": b"hello", "/array/v1/hooks": b"[1]"}[
            self.path
        ]
        self.send_response(200)
        if self.path.startswith("/chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (body[:5], body[5:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def odd_server() -> Iterator[str]:
    _Odd.protocol_version = "HTTP/1.1"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@BOTH
async def test_odd_replies(command: list[str], odd_server: str) -> None:
    code, out, _ = await shim("--url", f"{odd_server}/chunked", command=command, stdin=bash("ls", "s"))
    assert code == 0 and json.loads(out) == {"systemMessage": "hi"}
    for kind in ("text", "array"):
        assert (await shim("--url", f"{odd_server}/{kind}", command=command, stdin=bash("ls", "s")))[:2] == (0, b"")
        code, out, err = await shim(
            "--url", f"{odd_server}/{kind}", "--fail-closed", command=command, stdin=bash("ls", "s")
        )
        assert (code, out) == (2, b"") and b"not a JSON object" in err


@pytest.mark.system
async def test_arguments_the_shim_does_not_know_go_to_argparse() -> None:
    code, out, err = await shim("--bogus", stdin=b"{}")
    assert code == 2 and b"usage: hookbus" in err and b"--bogus" in err
    code, out, _ = await shim("--help", stdin=b"")
    assert code == 0 and b"--fail-closed" in out
    assert (await shim("--timeout", "soon", stdin=b""))[0] == 2


@pytest.mark.system
async def test_the_installed_command_says_in_one_line_which_arguments_it_cannot_run() -> None:
    for args in (["--bogus"], ["--help"], ["--timeout", "soon"]):
        code, out, err = await shim(*args, command=INSTALLED, stdin=b"{}")
        assert (code, out) == (2, b"") and err.startswith(b"hookbus: cannot run the hook with arguments ")
        assert args[0].encode() in err.splitlines()[0] and b"usage: " in err
    # Without "hook" first (a hand-written command), it runs nothing either.
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run([*INSTALLED, "--url", url], input=b"{}", capture_output=True, timeout=30, check=False)
    assert done.returncode == 2 and b"cannot run the hook" in done.stderr


# -- start-up cost: the import path stays stdlib-only -----------------------------------------


@pytest.mark.system
def test_the_hook_path_imports_only_the_standard_library() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['hookbus', 'hook', '--url', sys.argv[1]]\n"
        "from hookbus.cli import main\n"
        "code = main()\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-c", probe, url],
        input=bash("ls", "s"),
        capture_output=True,
        env=clean_env(),
        cwd=REPO,
        timeout=30,
        check=True,
    )
    loaded = set(done.stderr.decode().splitlines()[-1].split())
    assert "hookbus.shim" in loaded and "_socket" in loaded
    # Not even socket.py (4 ms of enum conversions) nor the idna codec: _socket and a bytes host.
    assert not {
        m for m in loaded for heavy in (*HEAVY, "socket", "encodings.idna") if m == heavy or m.startswith(heavy + ".")
    }


@pytest.mark.system
def test_the_installed_command_runs_without_site_and_imports_only_the_shim_and_the_standard_library(
    odd_server: str,
) -> None:
    python, isolated, no_site, start = INSTALLED
    assert Path(python).is_absolute() and (isolated, no_site) == ("-I", "-S") and Path(start).is_absolute()
    # The start file run as the installed command runs it, then the modules it loaded.
    probe = (
        "import posix, sys\n"
        "posix._exit = sys.exit  # the start file leaves with posix._exit: here, report the modules first\n"
        "start = sys.argv[1]\n"
        "sys.argv = [start, 'hook', '--url', sys.argv[2]]\n"
        "code = compile(open(start, 'rb').read(), start, 'exec')\n"
        "try:\n"
        "    exec(code, {'__name__': '__main__', '__file__': start})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
        "print(' '.join(sys.path), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [python, "-I", "-S", "-c", probe, start, f"{odd_server}/chunked"],
        input=bash("ls", "s"),
        capture_output=True,
        env=clean_env(),
        cwd=REPO,
        timeout=30,
        check=True,
    )
    assert json.loads(done.stdout) == {"systemMessage": "hi"}  # a JSON answer, read and checked
    *_, modules, path = done.stderr.decode().splitlines()
    loaded = set(modules.split())
    assert {"shim", "shim_json", "_socket"} <= loaded and "site" not in loaded
    assert not {m for m in loaded for own in ("hookbus", "bus", "gateway", "workers") if m.split(".")[0] == own}
    # Nor os (1 ms without site), nor json (its re and enum: 7 ms), nor even its C scanner _json (a
    # shared library): an answer of strings, booleans and integers is read by shim_json.
    lean = (*HEAVY, "socket", "encodings.idna", "json", "_json", "re", "enum", "os")
    assert not {m for m in loaded for heavy in lean if m == heavy or m.startswith(heavy + ".")}
    # The package folder is on sys.path only while the shim loads: its `platform` shadows the stdlib's.
    assert str(Path(start).parent) not in path.split()


@pytest.mark.system
def test_importing_the_cli_and_shim_pulls_in_nothing_heavy() -> None:
    probe = "import sys, hookbus.cli, hookbus.shim, hookbus.install.settings_file; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True, cwd=REPO, timeout=30)
        .stdout.decode()
        .split()
    )
    assert not loaded & {"pydantic", "redis", "httpx", "orjson", "yaml"}


# -- units ----------------------------------------------------------------------------------


def test_parse_args() -> None:
    assert parse_args([]) == (None, 5.0, False, "claude")
    assert parse_args(["--url", "http://h:1", "--timeout", "0.5", "--fail-closed"]) == (
        "http://h:1",
        0.5,
        True,
        "claude",
    )
    assert parse_args(["--url=http://h:1", "--timeout=2", "--agent", "Codex"]) == ("http://h:1", 2.0, False, "codex")
    assert parse_args(["--agent=gemini"]) == (None, 5.0, False, "gemini")
    bad_args = (["--url"], ["--timeout", "x"], ["--timeout", "0"], ["-h"], ["--nope"], ["--url", "--fail-closed"])
    for bad in (*bad_args, ["--agent"], ["--agent", "kodex"]):
        assert parse_args(bad) is None, bad


def test_agent_url_adds_the_dialect() -> None:
    assert agent_url("http://gw:9/v1/hooks", "claude") == "http://gw:9/v1/hooks"
    assert agent_url("http://gw:9/v1/hooks", "gemini") == "http://gw:9/v1/hooks?dialect=gemini"
    assert agent_url("http://gw:9/v1/hooks?x=1", "codex") == "http://gw:9/v1/hooks?x=1&dialect=codex"


def test_hook_url_and_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOOKBUS_URL", raising=False)
    assert hook_url(None) == "http://127.0.0.1:8787/v1/hooks"
    assert hook_url("http://gw:9/") == "http://gw:9/v1/hooks"
    assert hook_url("http://gw:9/v1/hooks?dialect=peri") == "http://gw:9/v1/hooks?dialect=peri"
    assert hook_url("http://gw:9?dialect=peri") == "http://gw:9/v1/hooks?dialect=peri"
    monkeypatch.setenv("HOOKBUS_URL", "http://env:1")
    assert hook_url(None) == "http://env:1/v1/hooks"
    assert _split("http://[::1]:8787/v1/hooks?x=1") == ("::1", 8787, "/v1/hooks?x=1")
    assert _split("http://gw/v1/hooks") == ("gw", 80, "/v1/hooks")
    assert _split("https://gw/v1/hooks") is None and _split("http://u:p@gw/") is None
    with pytest.raises(ValueError):
        _split("http://gw:port/")
    assert _unchunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n") == b"abcde"


def test_run_hook_in_process_never_raises(capsys: pytest.CaptureFixture[str]) -> None:
    from hookbus.shim import run_hook

    with contextlib.suppress(SystemExit):
        assert run_hook("not a url at all", 0.2, True, stdin=b"{}") == 2
    assert "failing closed" in capsys.readouterr().err


# -- agents that read no JSON decision: the exit-code form ------------------------------------


def windsurf_command(command: str, trajectory: str) -> bytes:
    tool_info = {"command_line": command, "cwd": "/tmp"}
    return json.dumps(
        {"agent_action_name": "pre_run_command", "trajectory_id": trajectory, "tool_info": tool_info}
    ).encode()


@BOTH
async def test_a_windsurf_deny_is_exit_2_with_the_reason_on_stderr(
    command: list[str], platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(DENY_RM) as p:
        code, out, err = await shim(
            "--agent", "windsurf", "--url", p.url, command=command, stdin=windsurf_command("rm -rf /", "t-deny")
        )
        assert (code, out) == (2, b"") and err.startswith(b"no rm -rf") and err.count(b"\n") == 1
        code, out, err = await shim(
            "--agent", "windsurf", "--url", p.url, command=command, stdin=windsurf_command("ls", "t-allow")
        )
        assert (code, out, err) == (0, b"", b"")  # Windsurf shows stdout: an allow prints nothing
        kiro = {
            "hook_event_name": "preToolUse",
            "cwd": "/tmp",
            "tool_name": "execute_bash",
            "tool_input": {"command": "rm -rf /"},
            "session_id": "k-deny",
        }
        code, out, err = await shim("--agent", "kiro", "--url", p.url, command=command, stdin=json.dumps(kiro).encode())
        assert (code, out) == (2, b"") and err.startswith(b"no rm -rf")
    assert (await logged_session(bus, "t-deny"))[0].decision == "deny"


@pytest.mark.system
@BOTH
async def test_windsurf_and_kiro_fail_open_with_nothing_on_stdout(command: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for agent in ("windsurf", "kiro"):
        code, out, err = await shim(
            "--agent", agent, "--url", url, command=command, stdin=windsurf_command("ls", "t-down")
        )
        assert (code, out) == (0, b"") and b"failing open" in err
        code, out, err = await shim(
            "--agent", agent, "--url", url, "--fail-closed", command=command, stdin=windsurf_command("ls", "t")
        )
        assert (code, out) == (2, b"") and b"failing closed" in err
    code, out, _ = await shim(
        "--agent", "auggie", "--url", url, command=command, stdin=windsurf_command("ls", "t-down")
    )
    assert (code, out) == (0, b"{}\n")


class _ExitCodeForm(http.server.BaseHTTPRequestHandler):
    """Answers in the exit-code form, chosen by the path: context on stdout, or a bare exit 2."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = {"/context/v1/hooks": b'{"stdout": "the repo is frozen"}', "/block/v1/hooks": b'{"exit_code": 2}'}[
            self.path.split("?")[0]
        ]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def exit_code_server() -> Iterator[str]:
    _ExitCodeForm.protocol_version = "HTTP/1.1"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ExitCodeForm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.system
@BOTH
async def test_the_exit_code_form_is_carried_out_only_for_its_agents(command: list[str], exit_code_server: str) -> None:
    prompt = json.dumps({"hook_event_name": "userPromptSubmit", "cwd": "/tmp", "prompt": "hi"}).encode()
    code, out, err = await shim(
        "--agent", "kiro", "--url", f"{exit_code_server}/context", command=command, stdin=prompt
    )
    assert (code, out, err) == (0, b"the repo is frozen\n", b"")
    assert (await shim("--agent", "kiro", "--url", f"{exit_code_server}/block", command=command, stdin=prompt))[:2] == (
        2,
        b"",
    )
    # an agent that reads JSON gets the answer as it came
    code, out, _ = await shim("--agent", "gemini", "--url", f"{exit_code_server}/block", command=command, stdin=prompt)
    assert (code, json.loads(out)) == (0, {"exit_code": 2})


HOME_RULES = """
hookbus: {deadlineSeconds: 2.0}
hooks:
  PreToolUse:
    - matcher: Read
      hooks:
        - {type: rule, allow: ["Read(~/notes/**)"]}
"""


def read(path: str, session: str) -> bytes:
    hook_input = {"hook_event_name": "PreToolUse", "session_id": session, "cwd": "/tmp", "tool_name": "Read"}
    return json.dumps({**hook_input, "tool_input": {"file_path": path}}).encode()


@BOTH
async def test_the_shim_sends_the_agents_home_which_is_what_tilde_stands_for(
    command: list[str], platform: Callable[..., Any]
) -> None:
    # No transcript_path: the home comes from the shim's $HOME (the agent's user), never the dispatcher's.
    async with platform(HOME_RULES) as p:
        mine = clean_env(HOME="/srv/agent")
        code, out, err = await shim(
            "--url", p.url, command=command, stdin=read("/srv/agent/notes/a.md", "s-home"), env=mine
        )
        assert code == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow", err
        code, out, err = await shim(
            "--url", p.url, command=command, stdin=read("/srv/other/notes/a.md", "s-home"), env=mine
        )
        assert (code, out) == (0, b""), err
        header = await p.post(read("/srv/agent/notes/a.md", "s-h"), headers={"X-Hookbus-Home": "/srv/agent"})
        assert header.json()["hookSpecificOutput"]["permissionDecision"] == "allow"
        for home in ("relative/home", "/", "/srv/agent\x01"):  # not a home: unknown, and ~ allows nothing
            unknown = await p.post(read("/srv/agent/notes/a.md", "s-h"), headers={"X-Hookbus-Home": home})
            assert unknown.json() == {}, home
