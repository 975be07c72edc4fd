"""``hookbus install auggie``: Auggie's settings.json hooks and the ``.sh`` script they run.

Every test runs the real command on real files in ``tmp_path``, and runs the written script
itself against a dead gateway, as Auggie would run it. Auggie cannot run here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.auggie import DEFAULT_EVENTS, FAIL_CLOSED_SCRIPT, SCRIPT, settings_path
from hookbus.platform.redis_server import free_port
from tests.conftest import clean_env
from tests.hookbus.test_shim import COMMAND

USER_SETTINGS: dict[str, Any] = {
    "model": "sonnet",
    "hooks": {"PreToolUse": [{"matcher": "launch-process", "hooks": [{"type": "command", "command": "/x/guard.sh"}]}]},
}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-secret-4")
    return project


def install(*args: str, url: str = "http://127.0.0.1:8787") -> int:
    command = " ".join(COMMAND)
    return main(["install", "auggie", "--no-check", "--url", url, "--hook-command", command, *args])


def test_install_writes_settings_and_the_script(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = isolated / ".augment" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER_SETTINGS))
    assert install("--fail-closed", "--timeout", "7") == 0
    settings = json.loads(path.read_text())
    assert (
        settings["model"] == "sonnet" and settings["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    )
    assert tuple(settings["hooks"]) == DEFAULT_EVENTS
    folder = isolated / ".augment" / "hooks"
    assert settings["hooks"]["PreToolUse"][1] == {
        "hooks": [{"type": "command", "command": str(folder / FAIL_CLOSED_SCRIPT), "timeout": 7000}]
    }
    assert settings["hooks"]["Stop"][0]["hooks"][0]["command"] == str(folder / SCRIPT)
    for script in (SCRIPT, FAIL_CLOSED_SCRIPT):
        assert (folder / script).stat().st_mode & 0o111 and "tok-secret-4" not in (folder / script).read_text()
    assert "--fail-closed" in (folder / FAIL_CLOSED_SCRIPT).read_text()
    assert "--fail-closed" not in (folder / SCRIPT).read_text()
    text = path.read_text()
    assert install("--fail-closed", "--timeout", "7") == 0 and path.read_text() == text
    assert "already up to date" in capsys.readouterr().out
    assert install("--uninstall") == 0
    assert json.loads(path.read_text()) == USER_SETTINGS and not folder.joinpath(SCRIPT).exists()
    assert not folder.joinpath(FAIL_CLOSED_SCRIPT).exists()


def test_a_plain_reinstall_drops_the_fail_closed_script(isolated: Path) -> None:
    assert install("--fail-closed") == 0
    assert install() == 0
    folder = isolated / ".augment" / "hooks"
    assert (folder / SCRIPT).exists() and not (folder / FAIL_CLOSED_SCRIPT).exists()


@pytest.mark.system
def test_the_scripts_run_the_shim_as_auggie_would(isolated: Path) -> None:
    assert install("--fail-closed", url=f"http://127.0.0.1:{free_port()}") == 0
    folder = isolated / ".augment" / "hooks"
    event = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "launch-process", "tool_input": {}})
    closed = subprocess.run(
        [folder / FAIL_CLOSED_SCRIPT], input=event.encode(), capture_output=True, env=clean_env(), timeout=30
    )
    assert closed.returncode == 2 and b"failing closed" in closed.stderr
    opened = subprocess.run([folder / SCRIPT], input=event.encode(), capture_output=True, env=clean_env(), timeout=30)
    assert (opened.returncode, opened.stdout) == (0, b"{}\n")


def test_dry_run_and_scopes(isolated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--dry-run") == 0
    out = capsys.readouterr().out
    assert (
        f"+++ {isolated / '.augment' / 'settings.json'}" in out
        and f"+++ {isolated / '.augment' / 'hooks' / SCRIPT}" in out
    )
    assert not (isolated / ".augment").exists()
    assert settings_path("user") == tmp_path / "home" / ".augment" / "settings.json"
    assert str(settings_path("managed")) == "/etc/augment/settings.json"
