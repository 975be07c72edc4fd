"""``hookbus install cursor``: what it writes into Cursor's hooks.json, what it keeps, where.

Every test runs the real command (``hookbus.cli.main``) on real files in ``tmp_path``.
Cursor itself cannot run here, so the file is checked against Cursor's documented format.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.cursor import DEFAULT_EVENTS, ENTERPRISE_FILES, WRITE_TOOLS_MATCHER, CursorHooks
from hookbus.install.hooks_json import is_hookbus_command
from hookbus.platform.redis_server import free_port

USER_FILE: dict[str, Any] = {
    "version": 1,
    "hooks": {"afterFileEdit": [{"command": "./hooks/format.sh"}], "beforeShellExecution": [{"command": "./audit.sh"}]},
}
USER_TEXT = json.dumps(USER_FILE, indent=4) + "\n"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("HOOKBUS_"):
            monkeypatch.delenv(name)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return project


def install(*args: str) -> int:
    return main(
        ["install", "cursor", "--no-check", "--url", "http://127.0.0.1:8787", "--hook-command", "hookbus", *args]
    )


def ours(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for event, entries in config["hooks"].items():
        for entry in entries:
            if is_hookbus_command(entry.get("command")):
                assert event not in found
                found[event] = entry
    return found


def test_install_merges_into_the_project_file_and_keeps_a_backup(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-secret-1")
    path = isolated / ".cursor" / "hooks.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install("--timeout", "8") == 0
    config = json.loads(path.read_text())
    assert config["version"] == 1 and config["hooks"]["afterFileEdit"] == USER_FILE["hooks"]["afterFileEdit"]
    assert config["hooks"]["beforeShellExecution"][0] == {"command": "./audit.sh"}  # the user's first
    entries = ours(config)
    assert tuple(entries) == DEFAULT_EVENTS
    assert entries["beforeShellExecution"] == {
        "command": "hookbus hook --agent cursor --url http://127.0.0.1:8787/v1/hooks",
        "timeout": 8,
    }
    assert entries["preToolUse"]["matcher"] == WRITE_TOOLS_MATCHER  # a shell call is not decided twice
    assert "tok-secret-1" not in path.read_text()  # the token is never written
    assert (path.parent / "hooks.json.bak").read_text() == USER_TEXT


def test_a_second_install_changes_nothing_and_uninstall_is_exact(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = isolated / ".cursor" / "hooks.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install() == 0
    first = path.read_text()
    assert install() == 0
    assert path.read_text() == first and "already up to date" in capsys.readouterr().out
    assert install("--uninstall") == 0
    assert json.loads(path.read_text()) == USER_FILE


def test_an_uninstall_removes_a_file_that_held_only_hookbus(isolated: Path) -> None:
    assert install() == 0
    path = isolated / ".cursor" / "hooks.json"
    assert list(json.loads(path.read_text())) == ["version", "hooks"]
    assert install("--uninstall") == 0
    assert not path.exists() and (path.parent / "hooks.json.bak").exists()


def test_fail_closed_only_where_cursor_decides(isolated: Path) -> None:
    assert install("--fail-closed", "--events", "beforeShellExecution", "stop", "PreToolUse") == 0
    entries = ours(json.loads((isolated / ".cursor" / "hooks.json").read_text()))
    assert set(entries) == {"beforeShellExecution", "beforeMCPExecution", "beforeReadFile", "preToolUse", "stop"}
    shell = entries["beforeShellExecution"]
    assert shell["failClosed"] is True and shell["command"].endswith("--fail-closed")
    assert "failClosed" not in entries["stop"] and "--fail-closed" not in entries["stop"]["command"]


def test_dry_run_prints_a_diff_and_writes_nothing(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith("--- /dev/null") and '"version": 1' in out and "--agent cursor" in out
    assert not (isolated / ".cursor").exists()


def test_scopes_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert CursorHooks().path("user") == tmp_path / "home" / ".cursor" / "hooks.json"
    assert str(CursorHooks().path("managed")) == ENTERPRISE_FILES["linux"]
    assert main(["install", "cursor", "--no-check", "--events", "BeforeTool"]) == 1
    assert "not Cursor hook events: BeforeTool" in capsys.readouterr().err


def test_warnings_name_the_traps(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = isolated / ".cursor" / "hooks.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"version": 2, "hooks": {}}))
    assert install() == 0
    err = capsys.readouterr().err
    assert "version is 2" in err and "trusted workspace" in err


@pytest.mark.system
def test_check_reports_an_unreachable_gateway(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["install", "cursor", "--check", "--url", dead]) == 1
    assert "check failed" in capsys.readouterr().err
    assert main(["install", "cursor", "--url", dead]) == 0  # written; the check warns
    assert "warning: check failed: the installed command runs but does not reach the gateway" in capsys.readouterr().err
    assert main(["install", "cursor", "--check"]) == 1  # the installed URL is the one checked
    assert dead in capsys.readouterr().err
