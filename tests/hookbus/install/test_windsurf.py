"""``hookbus install windsurf``: what it writes into Windsurf's hooks.json, what it keeps, where.

Every test runs the real command on real files in ``tmp_path``; Windsurf itself cannot run
here, so the file is checked against Windsurf's documented format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.hooks_json import is_hookbus_command
from hookbus.install.windsurf import DEFAULT_EVENTS, PRE_HOOKS, SYSTEM_FILES, WindsurfHooks

USER_FILE: dict[str, Any] = {"hooks": {"post_write_code": [{"command": "bash ~/fmt.sh", "show_output": False}]}}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-secret-2")
    return project


def install(*args: str) -> int:
    return main(
        ["install", "windsurf", "--no-check", "--url", "http://127.0.0.1:8787", "--hook-command", "hookbus", *args]
    )


def test_install_merge_idempotence_and_exact_uninstall(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = isolated / ".windsurf" / "hooks.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER_FILE))
    assert install("--fail-closed") == 0
    config = json.loads(path.read_text())
    assert config["hooks"]["post_write_code"][0] == USER_FILE["hooks"]["post_write_code"][0]
    ours = {event: e for event, entries in config["hooks"].items() for e in entries if is_hookbus_command(e["command"])}
    assert set(ours) == set(DEFAULT_EVENTS)
    assert ours["pre_run_command"] == {
        "command": "hookbus hook --agent windsurf --url http://127.0.0.1:8787/v1/hooks --fail-closed",
        "show_output": True,
    }
    assert all(e["command"].endswith("--fail-closed") == (event in PRE_HOOKS) for event, e in ours.items())
    assert "tok-secret-2" not in path.read_text()
    text = path.read_text()
    assert install("--fail-closed") == 0 and path.read_text() == text
    assert "already up to date" in capsys.readouterr().out
    assert install("--uninstall") == 0
    assert json.loads(path.read_text()) == USER_FILE


def test_events_by_windsurf_or_claude_names_and_dry_run(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--dry-run", "--events", "PreToolUse,post_cascade_response") == 0
    out = capsys.readouterr().out
    assert all(f'"{name}"' in out for name in ("pre_run_command", "pre_mcp_tool_use", "post_cascade_response"))
    assert '"pre_user_prompt"' not in out and not (isolated / ".windsurf").exists()
    assert install("--events", "pre_tool_use") == 1
    assert "not Windsurf hook events: pre_tool_use" in capsys.readouterr().err


def test_scopes_and_the_jetbrains_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert WindsurfHooks().path("user") == tmp_path / "home" / ".codeium" / "windsurf" / "hooks.json"
    assert str(WindsurfHooks().path("managed")) == SYSTEM_FILES["linux"] == "/etc/windsurf/hooks.json"
    (tmp_path / "home" / ".codeium").mkdir(parents=True)
    (tmp_path / "home" / ".codeium" / "hooks.json").write_text("{}")
    assert install("--scope", "user") == 0
    assert "JetBrains" in capsys.readouterr().err
    assert (tmp_path / "home" / ".codeium" / "windsurf" / "hooks.json").exists()
