"""``hookbus install claude``: what it writes, what it keeps, and that Claude Code could use it.

Settings files are checked against Claude Code's published settings schema (SchemaStore's,
kept in ``tests/data``). The end-to-end
test installs into a project, then sends every configured event to a live platform exactly
as Claude Code would: a POST to the http handler's URL with its headers after ``$VAR``
interpolation, or the command handler run by ``sh -c`` with the input on stdin.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bus.errors import ConfigError
from bus.hooks.events import CLAUDE_EVENTS
from bus.runtime.settings import Tokens
from hookbus.cli import main
from hookbus.install.command import AGENTS as INSTALL_AGENTS
from hookbus.install.settings_file import (
    DEFAULT_EVENTS,
    OPT_IN_EVENTS,
    SHIM_START,
    InstallPlan,
    default_hook_command,
    is_hookbus_handler,
    merge,
    settings_path,
    shim_flags,
)
from tests.conftest import REPO, BusProbe, async_wait_for, run_hookbus

SCHEMA_PATH = REPO / "tests" / "data" / "claude-code-settings.schema.json"
URL = "http://127.0.0.1:8787/v1/hooks"
USER_SETTINGS: dict[str, Any] = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "permissions": {"allow": ["Bash(npm run lint)"], "deny": ["Read(./.env)"]},
    "env": {"FOO": "bar"},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh", "timeout": 5}]},
        ],
        "Stop": [
            {
                "hooks": [
                    {
                        "type": "http",
                        "url": "http://audit.internal/stop",
                        "headers": {"X-Key": "$AUDIT"},
                        "allowedEnvVars": ["AUDIT"],
                    }
                ]
            }
        ],
        "Notification": [{"matcher": "idle_prompt", "hooks": [{"type": "command", "command": "say hi"}]}],
    },
}


@pytest.fixture
def validate() -> Callable[[dict[str, Any]], None]:
    import jsonschema

    validator = jsonschema.Draft7Validator(json.loads(SCHEMA_PATH.read_text()))
    return validator.validate  # type: ignore[no-any-return]


def install(path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["install", "claude", "--settings-file", str(path), "--no-check", *args])
    return code, json.loads(path.read_text()) if path.exists() else {}


def ours(settings: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """hookbus's handlers per event (events without any left out)."""
    found = {
        event: [h for g in groups for h in g["hooks"] if is_hookbus_handler(h)]
        for event, groups in settings.get("hooks", {}).items()
    }
    return {event: handlers for event, handlers in found.items() if handlers}


# -- what is written ------------------------------------------------------------------------


@pytest.mark.system
def test_default_install_validates_and_covers_every_event(tmp_path: Path, validate: Callable[..., None]) -> None:
    code, settings = install(tmp_path / "settings.json")
    assert code == 0
    validate(settings)
    handlers = ours(settings)
    assert list(handlers) == list(DEFAULT_EVENTS) and len(DEFAULT_EVENTS) == len(CLAUDE_EVENTS) - len(OPT_IN_EVENTS)
    for event, (handler, *rest) in handlers.items():
        assert not rest
        if event in ("SessionStart", "Setup"):
            command = f"{default_hook_command()} hook --url {URL}"
            assert handler == {"type": "command", "command": command, "timeout": 10}
        else:
            assert handler == {
                "type": "http",
                "url": URL,
                "headers": {"Authorization": "Bearer $HOOKBUS_TOKEN"},
                "allowedEnvVars": ["HOOKBUS_TOKEN"],
                "timeout": 10,
            }
    assert "matcher" not in settings["hooks"]["FileChanged"][0]  # "*" would watch a file named '*'


@pytest.mark.parametrize(
    "args",
    [
        ["--shim", "--fail-closed", "--timeout", "3", "--url", "http://gw.internal:9000"],
        ["--events", "PreToolUse", "Stop,SessionStart", "--hook-command", "/opt/hookbus/bin/hookbus"],
        ["--events", "WorktreeCreate", "--timeout", "2.5"],
    ],
)
def test_variants_validate(tmp_path: Path, validate: Callable[..., None], args: list[str]) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(USER_SETTINGS))
    code, settings = install(path, *args)
    assert code == 0
    validate(settings)
    if "--shim" in args:
        assert {h["type"] for hs in ours(settings).values() for h in hs} == {"command"}
        command = settings["hooks"]["Stop"][1]["hooks"][0]["command"]
        assert command == (
            f"{default_hook_command()} hook --url http://gw.internal:9000/v1/hooks --timeout 2.4 --fail-closed"
        )
    if "--hook-command" in args:
        assert list(ours(settings)) == ["PreToolUse", "Stop", "SessionStart"]
        assert ours(settings)["SessionStart"][0]["command"].startswith("/opt/hookbus/bin/hookbus hook --url ")


@pytest.mark.system
def test_scopes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings_path("project") == tmp_path / ".claude" / "settings.json"
    assert settings_path("user") == tmp_path / "home" / ".claude" / "settings.json"
    assert settings_path("managed", platform="linux") == Path("/etc/claude-code/managed-settings.json")
    assert str(settings_path("managed", platform="darwin")).endswith("ClaudeCode/managed-settings.json")
    with pytest.raises(ConfigError):
        settings_path("managed", platform="sunos5")
    assert main(["install", "claude", "--events", "Stop"]) == 0
    assert main(["install", "claude", "--scope", "user", "--events", "Stop"]) == 0
    assert ours(json.loads((tmp_path / ".claude" / "settings.json").read_text())) == ours(
        json.loads((tmp_path / "home" / ".claude" / "settings.json").read_text())
    )
    managed = tmp_path / "etc" / "managed-settings.json"
    assert install(managed, "--scope", "managed", "--events", "Stop", "--create")[0] == 0 and managed.exists()


# -- merging: idempotent, preserving, exact uninstall --------------------------------------


@pytest.mark.system
def test_idempotent_and_preserving(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(USER_SETTINGS, indent=4))
    _, first = install(path)
    text, stat = path.read_text(), path.stat()
    assert json.loads((tmp_path / "settings.json.bak").read_text()) == USER_SETTINGS
    assert main(["install", "claude", "--settings-file", str(path)]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert path.read_text() == text and path.stat().st_mtime_ns == stat.st_mtime_ns
    # Everything of the user's is where it was; hookbus's groups come after.
    for key in ("$schema", "permissions", "env"):
        assert first[key] == USER_SETTINGS[key]
    assert first["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    assert first["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    assert len(first["hooks"]["PreToolUse"]) == 2 and len(first["hooks"]["Notification"]) == 2
    assert list(first["hooks"])[:3] == ["PreToolUse", "Stop", "Notification"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json", "settings.json.bak"]  # no temp files


def test_reinstall_updates_in_place_and_uninstall_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(USER_SETTINGS))
    install(path)
    # The user adds a hook after ours; a reinstall with another URL must not move or duplicate.
    settings = json.loads(path.read_text())
    settings["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "notify-send done"}]})
    path.write_text(json.dumps(settings))
    _, moved = install(path, "--url", "http://gw2:8787", "--events", "Stop", "PreToolUse")
    assert list(ours(moved)) == ["PreToolUse", "Stop"]
    assert moved["hooks"]["Stop"][1]["hooks"][0]["url"] == "http://gw2:8787/v1/hooks"
    assert moved["hooks"]["Stop"][2]["hooks"][0]["command"] == "notify-send done"
    assert sum(len(h) for h in ours(moved).values()) == 2
    assert install(path, "--uninstall", "--url", "http://elsewhere:1")[1] == moved  # another gateway: untouched
    _, removed = install(path, "--uninstall")
    expected = copy.deepcopy(USER_SETTINGS)
    expected["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "notify-send done"}]})
    assert removed == expected
    fresh = tmp_path / "fresh.json"
    install(fresh)
    assert install(fresh, "--uninstall")[1] == {}
    # The one thing not restored: an empty event list (it means nothing to Claude Code).
    empty = tmp_path / "empty.json"
    empty.write_text('{"hooks": {"Stop": [], "PreToolUse": []}}')
    install(empty, "--events", "Stop")
    assert install(empty, "--uninstall")[1] == {"hooks": {"PreToolUse": []}}


def test_a_handler_is_ours_only_by_its_exact_shape() -> None:
    plan = InstallPlan(url=URL)
    assert is_hookbus_handler(plan.handler("Stop")) and is_hookbus_handler(plan.handler("SessionStart"))
    assert is_hookbus_handler({"type": "command", "command": "python -m hookbus hook --url=http://x/v1/hooks"})
    assert is_hookbus_handler(plan.handler("Stop"), url="http://127.0.0.1:8787")
    assert not is_hookbus_handler(plan.handler("Stop"), url="http://other:1")
    not_ours = [
        {**plan.handler("Stop"), "headers": {"Authorization": "Bearer $OTHER"}},
        {**plan.handler("Stop"), "allowedEnvVars": ["HOOKBUS_TOKEN", "X"]},
        {**plan.handler("Stop"), "url": "http://127.0.0.1:8787/other"},
        {"type": "command", "command": "hookbus emit Stop --url http://x"},
        {"type": "command", "command": "my-hookbus hook --url http://x"},
        {"type": "command", "command": "hookbus hook 'unbalanced"},
        {"type": "prompt", "prompt": "hookbus hook --url x"},
        "hookbus",
    ]
    assert not any(is_hookbus_handler(h) for h in not_ours)
    assert merge({"hooks": {"Stop": [{"hooks": not_ours[:3]}]}}, None) == {"hooks": {"Stop": [{"hooks": not_ours[:3]}]}}


def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / ".claude" / "settings.json"
    assert main(["install", "claude", "--settings-file", str(path), "--dry-run", "--events", "Stop"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- /dev/null\n+++ ") and "@@" in out and '+            "type": "http",' in out
    assert not path.parent.exists()
    path.parent.mkdir()
    path.write_text(json.dumps(USER_SETTINGS))
    before = path.read_text()
    assert main(["install", "claude", "--settings-file", str(path), "--dry-run", "--uninstall"]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert main(["install", "claude", "--settings-file", str(path), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"--- {path}\n+++ {path}\n")
    assert path.read_text() == before and not (path.parent / "settings.json.bak").exists()


@pytest.mark.system
def test_errors_and_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"hooks": {,}')
    assert main(["install", "claude", "--settings-file", str(broken)]) == 1
    assert "not valid JSON" in capsys.readouterr().err and broken.read_text() == '{"hooks": {,}'
    assert main(["install", "claude", "--settings-file", str(tmp_path / "x.json"), "--events", "Nope"]) == 1
    assert "not Claude Code events: Nope" in capsys.readouterr().err
    guarded = tmp_path / "guarded.json"
    guarded.write_text(json.dumps({"allowedHttpHookUrls": ["https://*.corp"], "httpHookAllowedEnvVars": ["X"]}))
    assert main(["install", "claude", "--settings-file", str(guarded), "--events", "Stop"]) == 0
    out = capsys.readouterr().out
    assert "allowedHttpHookUrls does not admit" in out and "httpHookAllowedEnvVars does not list" in out
    guarded.write_text(json.dumps({"allowedHttpHookUrls": ["http://127.0.0.1:*"]}))
    assert main(["install", "claude", "--settings-file", str(guarded), "--events", "Stop"]) == 0
    assert "note:" not in capsys.readouterr().out


@pytest.mark.system
def test_the_console_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookbus", "install", "claude", "--events", "Stop"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "1 http hooks and 0 command hooks" in done.stdout
    assert ours(json.loads((tmp_path / ".claude" / "settings.json").read_text())) == {
        "Stop": [InstallPlan(url=URL).handler("Stop")]
    }


# -- end to end: every installed event reaches the gateway as Claude Code would send it -----

E2E_POLICY = """
hookbus: {deadlineSeconds: 3.0}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"], reason: "no rm -rf"}
  SessionStart:
    - hooks:
        - {type: command, command: "echo fleet rules apply"}
"""
EXTRA: dict[str, dict[str, Any]] = {
    "PreToolUse": {"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}, "tool_use_id": "t1"},
    "PostToolUse": {"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": {"stdout": ""}},
    "UserPromptSubmit": {"prompt": "hello"},
    "SessionStart": {"source": "startup", "model": "claude-sonnet"},
    "Setup": {"trigger": "init"},
    "Stop": {"stop_hook_active": False, "last_assistant_message": "done"},
    "Notification": {"message": "waiting", "notification_type": "idle_prompt"},
}


def interpolate(value: str, allowed: list[str]) -> str:
    """Claude Code's header interpolation: $VAR / ${VAR}, unlisted variables become ''."""
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: os.environ.get(m[1] or m[2], "") if (m[1] or m[2]) in allowed else "", value
    )


async def test_end_to_end_every_installed_event_reaches_the_gateway(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-e2e")
    async with platform(E2E_POLICY, tokens=Tokens.parse("fleet:tok-e2e")) as p:
        monkeypatch.chdir(tmp_path)
        assert main(["install", "claude", "--url", p.url, "--no-check"]) == 0  # the gateway runs on this loop
        settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        replies: dict[str, Any] = {}
        async with httpx.AsyncClient() as http:
            for event, groups in settings["hooks"].items():
                handler = groups[0]["hooks"][0]
                body = {
                    "session_id": f"e2e-{event}",
                    "transcript_path": str(tmp_path / "t.jsonl"),
                    "cwd": str(tmp_path),
                    "hook_event_name": event,
                    **EXTRA.get(event, {}),
                }
                if handler["type"] == "http":
                    headers = {
                        k: interpolate(v, handler.get("allowedEnvVars", []))
                        for k, v in handler.get("headers", {}).items()
                    }
                    reply = await http.post(handler["url"], json=body, headers=headers, timeout=handler["timeout"])
                    assert reply.status_code == 200, (event, reply.text)
                    replies[event] = reply.json()
                else:
                    process = await asyncio.create_subprocess_shell(
                        handler["command"],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env=env,
                    )
                    out, err = await asyncio.wait_for(
                        process.communicate(json.dumps(body).encode()), handler["timeout"]
                    )
                    assert process.returncode == 0 and b"failing" not in err, (event, err)
                    replies[event] = json.loads(out) if out.strip() else {}
        events = list(settings["hooks"])

        async def all_logged() -> bool:
            return {f"e2e-{e}" for e in events} <= {r.session_id for r in await bus.log()}

        await async_wait_for(all_logged, timeout_s=10)
    assert events == list(DEFAULT_EVENTS)
    assert replies["PreToolUse"]["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert replies["SessionStart"]["hookSpecificOutput"]["additionalContext"].strip() == "fleet rules apply"
    records = {r.session_id: r for r in await bus.log()}
    assert records["e2e-PreToolUse"].tenant == "fleet" and records["e2e-SessionStart"].tenant == "fleet"


# -- the shim's command, the URL, the settings folder -------------------------------------------------


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_shim_command_is_the_python_that_ran_the_installer_on_the_shims_start_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = executable(tmp_path / "venv" / "bin" / "python")
    assert Path(SHIM_START) == REPO / "hookbus" / "shim_start.py" and Path(SHIM_START).is_file()
    # -I -S: no site, no PYTHON* variables, no current folder on sys.path; both paths absolute.
    assert default_hook_command(str(python)) == f"{python} -I -S {SHIM_START}"
    monkeypatch.chdir(python.parent)
    assert default_hook_command("./python") == f"{python} -I -S {SHIM_START}"
    with pytest.raises(ConfigError, match="--hook-command"):
        default_hook_command("")


def test_the_default_shim_command_is_never_a_bare_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    argv = shlex.split(default_hook_command())
    assert os.path.isabs(argv[0]) and argv[1:3] == ["-I", "-S"] and os.path.isabs(argv[3])


def test_a_shim_command_with_spaces_is_quoted_and_still_recognised(tmp_path: Path) -> None:
    python = executable(tmp_path / "my venv" / "bin" / "python")
    command = default_hook_command(str(python))
    assert command == f"'{tmp_path}/my venv/bin/python' -I -S {SHIM_START}"
    handler = InstallPlan(url=URL, hook_command=command).handler("SessionStart")
    assert handler["command"].startswith(f"'{tmp_path}/my venv/bin/python' -I -S {SHIM_START} hook --url ")
    assert is_hookbus_handler(handler, URL)


@pytest.mark.parametrize(
    ("command", "ours"),
    [
        (f"/opt/bin/python3 -I -S /opt/lib/hookbus/shim_start.py hook --url {URL}", True),
        (f"/opt/bin/hookbus hook --url {URL}", True),  # what earlier versions installed: still found
        (f"/opt/bin/python3 -m hookbus hook --url {URL}", True),
        (f"/opt/bin/python3 -I -S /opt/lib/other/shim_start.py hook --url {URL}", False),
        (f"/opt/bin/python3 -I -S /opt/lib/hookbus/shim_start.py --url {URL}", False),
        (f"/opt/bin/python3 /opt/lib/hookbus/shim_start.py hook --url {URL}", False),
    ],
)
def test_which_shim_commands_are_hookbus_s(command: str, ours: bool) -> None:
    assert is_hookbus_handler({"type": "command", "command": command}, URL) is ours
    assert (shim_flags(shlex.split(command)) == ["--url", URL]) is ours


@pytest.mark.parametrize("url", ["hookbus.internal:8787", "ftp://hookbus.internal", "http://", "/v1/hooks"])
def test_the_url_must_be_http(tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, _ = install(tmp_path / "settings.json", "--url", url)
    assert code == 1
    assert capsys.readouterr().err == (
        f"hookbus: --url must be an http(s) URL such as http://hookbus.internal:8787 (got {url!r})\n"
    )
    assert not (tmp_path / "settings.json").exists()


@pytest.mark.parametrize(
    "url", ["http://gw:9000", "http://gw:9000/", "http://gw:9000/v1/hooks/", "http://gw:9000/v1/hooks//"]
)
def test_trailing_slashes_are_normalised(tmp_path: Path, url: str) -> None:
    _, settings = install(tmp_path / "settings.json", "--url", url, "--events", "Stop")
    assert settings["hooks"]["Stop"][0]["hooks"][0]["url"] == "http://gw:9000/v1/hooks"


def test_a_missing_settings_folder_is_an_error_unless_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo" / "settings.json"
    assert install(path, "--events", "Stop")[0] == 1
    assert capsys.readouterr().err == f"hookbus: {path.parent} does not exist (a typo?); pass --create to make it\n"
    assert not path.parent.exists()
    assert install(path, "--events", "Stop", "--dry-run")[0] == 0 and not path.parent.exists()
    code, settings = install(path, "--events", "Stop", "--create")
    assert code == 0 and list(ours(settings)) == ["Stop"]


# -- files are written without following a planted link -------------------------------------------

#: A repository's own settings: the second line would run in a shell that sourced the file.
HOSTILE_SETTINGS = '{\n"$(touch /tmp/hookbus-pwned)": 1\n}\n'


@pytest.mark.system
def test_a_planted_bak_link_is_replaced_not_followed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    bashrc = home / ".bashrc"
    bashrc.write_text("export PATH=$HOME/bin:$PATH\n")
    repo = home / "src" / "repo"
    (repo / ".claude").mkdir(parents=True)
    (repo / ".claude" / "settings.json").write_text(HOSTILE_SETTINGS)
    bak = repo / ".claude" / "settings.json.bak"
    bak.symlink_to(Path("..", "..", "..", ".bashrc"))
    assert bak.resolve() == bashrc
    done = run_hookbus("install", "claude", "--events", "Stop", "--no-check", cwd=repo, HOME=str(home))
    assert done.returncode == 0, done.stderr
    assert bashrc.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert not bak.is_symlink() and bak.read_text() == HOSTILE_SETTINGS
    assert done.stderr == f"hookbus: warning: {bak} was a symbolic link; replaced it with a regular file\n"
    assert "Stop" in json.loads((repo / ".claude" / "settings.json").read_text())["hooks"]


def _written_file(agent: str, folder: Path) -> tuple[Path, Path]:
    """``--settings-file`` for ``agent``, and the file in it whose ``.bak`` an update writes."""
    if agent == "cline":  # a folder of one script per event
        return folder / "hooks", folder / "hooks" / "PreToolUse"
    name = {"codex": "config.toml", "opencode": "hookbus.js"}.get(agent, "settings.json")
    return folder / name, folder / name


@pytest.mark.parametrize("agent", [agent for agent in INSTALL_AGENTS if agent != "auggie"])
def test_no_installer_writes_through_a_bak_link(tmp_path: Path, capsys: pytest.CaptureFixture[str], agent: str) -> None:
    # Auggie's settings name its scripts, not the URL: an update rewrites only the scripts, without backups.
    outside = tmp_path / "outside"
    outside.write_text("mine\n")
    target, written = _written_file(agent, tmp_path / agent)
    args = ["install", agent, "--settings-file", str(target), "--create", "--no-check"]
    assert main([*args, "--url", "http://gw-one:8787"]) == 0
    before = written.read_text()
    bak = written.with_name(written.name + ".bak")
    bak.symlink_to(outside)
    capsys.readouterr()
    assert main([*args, "--url", "http://gw-two:8787"]) == 0
    assert outside.read_text() == "mine\n"
    assert not bak.is_symlink() and bak.read_text() == before
    assert f"hookbus: warning: {bak} was a symbolic link" in capsys.readouterr().err


def test_a_settings_file_that_is_a_link_is_written_where_it_leads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps(USER_SETTINGS))
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(dotfiles)
    _, settings = install(link, "--events", "Stop")
    assert link.is_symlink() and list(ours(settings)) == ["Stop"]
    assert json.loads(dotfiles.with_name("claude-settings.json.bak").read_text()) == USER_SETTINGS
    assert not (link.parent / "settings.json.bak").exists()
    assert f"{link} is a symbolic link; writing the file it leads to, {dotfiles}" in capsys.readouterr().out


def test_a_dangling_settings_link_is_replaced_not_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "autostart" / "evil.desktop"
    elsewhere.parent.mkdir()
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(elsewhere)
    _, settings = install(link, "--events", "Stop")
    assert not elsewhere.exists() and not link.is_symlink() and list(ours(settings)) == ["Stop"]
    assert f"hookbus: warning: {link} was a symbolic link" in capsys.readouterr().err
