"""``hookbus install kiro``: Kiro's standalone hook file, or an agent configuration's hooks.

Every test runs the real command on real files in ``tmp_path``; Kiro itself cannot run here,
so the files are checked against Kiro's documented formats.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hookbus.cli import main
from hookbus.install.kiro import KIRO_TRIGGERS, KiroHooks

URL = "http://127.0.0.1:8787/v1/hooks"
AGENT = {"name": "dev", "prompt": "You are careful.", "tools": ["*"], "hooks": {"preToolUse": [{"command": "lint"}]}}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-secret-3")
    return project


def install(*args: str) -> int:
    return main(["install", "kiro", "--no-check", "--url", "http://127.0.0.1:8787", "--hook-command", "hookbus", *args])


def test_the_standalone_hook_file(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--fail-closed", "--timeout", "6") == 0
    path = isolated / ".kiro" / "hooks" / "hookbus.json"
    config = json.loads(path.read_text())
    assert config["version"] == "v1" and [hook["trigger"] for hook in config["hooks"]] == list(KIRO_TRIGGERS)
    pre = next(hook for hook in config["hooks"] if hook["trigger"] == "PreToolUse")
    assert pre == {
        "name": "hookbus-PreToolUse",
        "trigger": "PreToolUse",
        "action": {"type": "command", "command": f"hookbus hook --agent kiro --url {URL} --timeout 4.8 --fail-closed"},
        "timeout": 6,
        "enabled": True,
    }
    stop = next(hook for hook in config["hooks"] if hook["trigger"] == "Stop")
    assert "--fail-closed" not in stop["action"]["command"]  # Kiro's stop cannot block
    assert "tok-secret-3" not in path.read_text()
    text = path.read_text()
    assert install("--fail-closed", "--timeout", "6") == 0 and path.read_text() == text
    assert install("--uninstall") == 0 and not path.exists()
    assert "removed" in capsys.readouterr().out


def test_someone_else_s_hooks_in_the_file_stay(isolated: Path) -> None:
    path = isolated / ".kiro" / "hooks" / "hookbus.json"
    path.parent.mkdir(parents=True)
    theirs = {"name": "fmt", "trigger": "PostFileSave", "action": {"type": "command", "command": "fmt"}}
    path.write_text(json.dumps({"version": "v1", "hooks": [theirs]}))
    assert install("--events", "preToolUse") == 0
    hooks = json.loads(path.read_text())["hooks"]
    assert hooks[0] == theirs and [hook["trigger"] for hook in hooks[1:]] == ["PreToolUse"]
    assert install("--uninstall") == 0
    assert json.loads(path.read_text()) == {"version": "v1", "hooks": [theirs]}


def test_an_agent_configuration_gets_the_agent_config_form(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = isolated / "dev.json"
    path.write_text(json.dumps(AGENT))
    assert install("--settings-file", str(path)) == 0
    config = json.loads(path.read_text())
    assert "version" not in config and config["prompt"] == AGENT["prompt"]
    assert set(config["hooks"]) == {"agentSpawn", "userPromptSubmit", "preToolUse", "postToolUse", "stop"}
    assert config["hooks"]["preToolUse"] == [
        {"command": "lint"},
        {"command": f"hookbus hook --agent kiro --url {URL}", "timeout_ms": 10000},
    ]
    assert "only for that agent" in capsys.readouterr().err
    assert install("--settings-file", str(path), "--uninstall") == 0
    assert json.loads(path.read_text()) == AGENT


def test_scopes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert KiroHooks().path("user") == tmp_path / "home" / ".kiro" / "hooks" / "hookbus.json"
    assert install("--scope", "managed") == 1
    assert "no managed hooks location" in capsys.readouterr().err
