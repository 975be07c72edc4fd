"""``hookbus install gemini``: what it writes into Gemini CLI's settings, what it keeps, where, and its warnings.

Every test runs the real command (``hookbus.cli.main``, or ``python -m hookbus`` where the
output and exit code of a whole process matter) on real files in ``tmp_path``. That Gemini
CLI itself runs what is written is shown by ``tests/agents/test_gemini.py``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.gemini import DEFAULT_EVENTS, GEMINI_HOOK_EVENTS, insecure_ancestor
from hookbus.install.settings_file import default_hook_command, is_hookbus_handler
from tests.conftest import REPO

URL = "http://127.0.0.1:8787/v1/hooks"
#: A user's own Gemini settings, written with four-space indents (hookbus writes two).
USER_SETTINGS: dict[str, Any] = {
    "general": {"vimMode": True},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "hooks": {
        "BeforeTool": [
            {
                "matcher": "write_file|replace",
                "hooks": [{"type": "command", "name": "lint", "command": "~/bin/lint.sh", "timeout": 3000}],
            }
        ],
    },
}
USER_TEXT = json.dumps(USER_SETTINGS, indent=4) + "\n"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as cwd, a Gemini home that trusts it, and no Gemini or hookbus variables."""
    for name in list(os.environ):
        if name.startswith(("GEMINI_", "HOOKBUS_")):
            monkeypatch.delenv(name)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(home))
    return project


def install(*args: str) -> int:
    return main(["install", "gemini", "--no-check", "--url", "http://127.0.0.1:8787", *args])


def hookbus_handlers(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for event, groups in settings.get("hooks", {}).items():
        for group in groups:
            for handler in group["hooks"]:
                if is_hookbus_handler(handler):
                    assert event not in found, f"two hookbus handlers on {event}"
                    found[event] = handler
    return found


def test_project_install_merges_and_keeps_a_backup(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = isolated / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install() == 0
    settings = json.loads(path.read_text())
    assert settings["general"] == {"vimMode": True} and settings["security"] == USER_SETTINGS["security"]
    assert settings["hooks"]["BeforeTool"][0] == USER_SETTINGS["hooks"]["BeforeTool"][0]  # the user's first
    handlers = hookbus_handlers(settings)
    assert tuple(handlers) == DEFAULT_EVENTS
    handler = handlers["BeforeTool"]
    assert set(handler) == {"type", "name", "command", "timeout"}
    assert (handler["type"], handler["name"], handler["timeout"]) == ("command", "hookbus", 10_000)  # milliseconds
    argv = shlex.split(handler["command"])
    assert argv == [*shlex.split(default_hook_command()), "hook", "--agent", "gemini", "--url", URL]
    assert "Bearer" not in path.read_text() and "HOOKBUS_TOKEN" not in path.read_text()  # no token in the file
    assert (path.parent / "settings.json.bak").read_text() == USER_TEXT
    out, err = capsys.readouterr()
    assert f"{path}: 7 command hooks" in out and "export $HOOKBUS_TOKEN where gemini runs" in out
    assert "warning" not in err  # a trusted folder, hooks enabled


def test_a_second_install_changes_nothing_and_says_so(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install() == 0
    path = isolated / ".gemini" / "settings.json"
    first = path.read_bytes()
    assert not (path.parent / "settings.json.bak").exists()  # there was no file to back up
    capsys.readouterr()
    assert install() == 0
    assert path.read_bytes() == first and not (path.parent / "settings.json.bak").exists()
    assert "already up to date; nothing to change" in capsys.readouterr().out


def test_uninstall_restores_the_file_byte_for_byte(isolated: Path) -> None:
    path = isolated / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install() == 0 and install("--uninstall") == 0
    assert path.read_text() == USER_TEXT  # the backup was the file before the install: restored exactly
    assert install() == 0 and install("--events", "BeforeTool") == 0  # a second write: the .bak holds hookbus's
    assert install("--uninstall") == 0
    assert json.loads(path.read_text()) == USER_SETTINGS and hookbus_handlers(json.loads(path.read_text())) == {}


def test_uninstall_keeps_what_the_user_changed_since(isolated: Path) -> None:
    path = isolated / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install() == 0
    edited = json.loads(path.read_text())
    edited["general"]["vimMode"] = False
    edited["hooks"]["AfterAgent"].append({"hooks": [{"type": "command", "command": "notify-send done"}]})
    path.write_text(json.dumps(edited))
    assert install("--uninstall") == 0
    after = json.loads(path.read_text())
    assert after["general"] == {"vimMode": False}
    assert after["hooks"]["BeforeTool"] == USER_SETTINGS["hooks"]["BeforeTool"]
    assert after["hooks"]["AfterAgent"] == [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
    assert set(after["hooks"]) == {"BeforeTool", "AfterAgent"} and hookbus_handlers(after) == {}
    assert install("--uninstall") == 0  # nothing left to remove


def test_dry_run_prints_a_diff_and_writes_nothing(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = isolated / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install("--dry-run") == 0
    diff = capsys.readouterr().out
    assert diff.startswith(f"--- {path}\n+++ {path}\n@@")
    assert '+                    "command": ' in diff or "hook --agent gemini" in diff
    assert path.read_text() == USER_TEXT and not (path.parent / "settings.json.bak").exists()


def test_user_scope_follows_gemini_cli_home(tmp_path: Path) -> None:
    assert install("--scope", "user") == 0
    written = tmp_path / "gemini-home" / ".gemini" / "settings.json"
    assert tuple(hookbus_handlers(json.loads(written.read_text()))) == DEFAULT_EVENTS
    assert not (tmp_path / "project" / ".gemini").exists()


def test_managed_scope_follows_the_system_settings_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    system = tmp_path / "etc" / "gemini-cli" / "settings.json"
    system.parent.mkdir(parents=True)
    monkeypatch.setenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH", str(system))
    capsys.readouterr()
    assert install("--scope", "managed", "--fail-closed", "--timeout", "3") == 0
    # under /tmp (world-writable) Gemini would skip the file: the installer says so
    assert (
        "hookbus: warning: Gemini CLI skips system settings unless the file and every folder" in capsys.readouterr().err
    )
    assert insecure_ancestor(system) is not None and insecure_ancestor(Path("/")) is None
    handler = hookbus_handlers(json.loads(system.read_text()))["BeforeTool"]
    assert handler["timeout"] == 3000
    assert shlex.split(handler["command"])[-3:] == ["--timeout", "2.4", "--fail-closed"]  # below Gemini's timeout
    monkeypatch.delenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH")
    if not os.access("/etc", os.W_OK) and not Path("/etc/gemini-cli").exists():
        assert install("--scope", "managed") == 1
        assert "permission denied" in capsys.readouterr().err


def test_events_take_gemini_or_claude_names() -> None:
    assert install("--events", "BeforeTool,Stop", "PreCompact", "BeforeModel", "Stop") == 0
    settings = json.loads(Path(".gemini/settings.json").read_text())
    assert tuple(hookbus_handlers(settings)) == ("BeforeTool", "AfterAgent", "PreCompress", "BeforeModel")
    assert set(GEMINI_HOOK_EVENTS) >= set(settings["hooks"])


def warnings_of(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    capsys.readouterr()
    assert install(*args) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("hookbus: warning: ")]


def test_warnings_name_the_traps_that_keep_hooks_from_running(
    isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert warnings_of(capsys) == []
    elsewhere = tmp_path / "untrusted"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (untrusted,) = warnings_of(capsys)
    assert f"does not trust {elsewhere}" in untrusted and "exit 55" in untrusted
    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    assert warnings_of(capsys) == []
    monkeypatch.delenv("GEMINI_CLI_TRUST_WORKSPACE")
    monkeypatch.chdir(isolated)
    path = isolated / ".gemini" / "settings.json"
    settings = json.loads(path.read_text())
    settings["hooksConfig"] = {"enabled": False, "disabled": ["hookbus"]}
    path.write_text(json.dumps(settings))
    found = warnings_of(capsys)
    assert any("hooksConfig.enabled is false" in w for w in found)
    assert any("hooksConfig.disabled lists 'hookbus'" in w for w in found) and len(found) == 2
    del settings["hooksConfig"]
    path.write_text(json.dumps(settings))
    assert warnings_of(capsys, "--events", "BeforeTool", "PreCompress") == []  # the same command on more events
    (changed,) = warnings_of(capsys, "--fail-closed")
    assert "trusts project hooks by name and command" in changed


@pytest.mark.parametrize(
    ("args", "setup", "message"),
    [
        (["--events", "BeforeTool", "Nope"], None, "not Gemini CLI hook events: Nope"),
        (["--url", "ftp://x"], None, "--url must be an http(s) URL"),
        (["--timeout", "0"], None, "--timeout must be more than 0 seconds"),
        (["--settings-file", "missing/settings.json"], None, "does not exist (a typo?); pass --create"),
        ([], "{ // a comment\n}", "has comments, which rewriting it would lose"),
        ([], "{not json", "is not valid JSON"),
        ([], '{"hooks": []}', "'hooks' is not an object"),
    ],
)
def test_bad_input_is_one_clear_line(
    isolated: Path, capsys: pytest.CaptureFixture[str], args: list[str], setup: str | None, message: str
) -> None:
    if setup is not None:
        (isolated / ".gemini").mkdir()
        (isolated / ".gemini" / "settings.json").write_text(setup)
    assert main(["install", "gemini", "--no-check", *args]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("hookbus: ") and message in lines[0], err


@pytest.mark.system
def test_a_bad_install_exits_1_with_no_traceback(isolated: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookbus", "install", "gemini", "--no-check", "--events", "Nope"],
        cwd=isolated,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("hookbus: not Gemini CLI hook events: Nope") and "Traceback" not in done.stderr


def test_create_makes_the_settings_files_folder(isolated: Path) -> None:
    target = isolated / "deep" / "er" / "settings.json"
    assert install("--settings-file", str(target), "--create") == 0
    assert tuple(hookbus_handlers(json.loads(target.read_text()))) == DEFAULT_EVENTS


@pytest.mark.system
def test_check_reports_an_unreachable_gateway(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install() == 0
    capsys.readouterr()
    assert main(["install", "gemini", "--check"]) == 1  # the URL comes from the installed hooks
    assert "check failed" in capsys.readouterr().err
