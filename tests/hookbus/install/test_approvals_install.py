"""``hookbus install claude --approvals``: the approval events fail closed and wait for a person."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from bus.policy.approvals import APPROVAL_EVENTS
from hookbus.cli import main
from hookbus.install import settings_file
from hookbus.install.settings_file import InstallPlan

URL = "http://127.0.0.1:8787"


def test_with_approvals_on_the_approval_events_use_the_shim_that_fails_closed_and_waits_long() -> None:
    plan = InstallPlan(url="http://127.0.0.1:8787", approval_timeout_s=600.0)
    for event in ("PreToolUse", "PermissionRequest"):
        handler = plan.handler(event)
        # An http hook whose connection drops lets the tool run: a fault would be an allow.
        assert handler["type"] == "command" and handler["timeout"] == 600
        words = shlex.split(handler["command"])
        assert "--fail-closed" in words
        assert float(words[words.index("--timeout") + 1]) == 480  # answers before Claude Code's timeout does
    assert plan.handler("PostToolUse")["type"] == "http"  # other events as before
    without = InstallPlan(url="http://127.0.0.1:8787")
    assert without.handler("PreToolUse")["type"] == "http"


def test_the_installer_knows_the_approval_events_of_the_policy() -> None:
    assert settings_file.APPROVAL_EVENTS == APPROVAL_EVENTS


def _held(command: str, agent: str) -> float:
    """The shim's ``--timeout`` of an approval handler's ``command``, once it is checked to fail closed."""
    words = shlex.split(command)
    assert words[words.index("--agent") + 1] == agent and "--fail-closed" in words
    return float(words[words.index("--timeout") + 1])


def test_gemini_approvals_put_before_tool_on_the_shim_that_fails_closed_with_a_long_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith(("GEMINI_", "HOOKBUS_")):
            monkeypatch.delenv(name)
    path = tmp_path / "settings.json"
    argv = ["install", "gemini", "--no-check", "--url", URL, "--settings-file", str(path), "--hook-command", "/x/hb"]
    assert main([*argv, "--approvals", "900", "--events", "BeforeTool", "AfterTool"]) == 0
    hooks = json.loads(path.read_text())["hooks"]
    [before] = hooks["BeforeTool"][0]["hooks"]
    assert before["timeout"] == 900_000  # Gemini's timeout is in milliseconds
    assert _held(before["command"], "gemini") == 720  # answers before Gemini's timeout does
    [after] = hooks["AfterTool"][0]["hooks"]
    assert after["timeout"] == 10_000 and "--fail-closed" not in after["command"]


def test_qwen_approvals_put_the_approval_events_on_the_shim_that_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("QWEN_HOME", "HOOKBUS_URL", "HOOKBUS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "settings.json"
    argv = ["install", "qwen", "--no-check", "--url", URL, "--settings-file", str(path), "--hook-command", "/x/hb"]
    assert main([*argv, "--approvals", "--events", "PreToolUse", "PermissionRequest", "PostToolUse"]) == 0
    hooks = json.loads(path.read_text())["hooks"]
    for event in ("PreToolUse", "PermissionRequest"):
        [held] = hooks[event][0]["hooks"]
        assert held["type"] == "command" and held["timeout"] == 600_000
        assert _held(held["command"], "qwen") == 480
    [after] = hooks["PostToolUse"][0]["hooks"]
    assert after["type"] == "http"  # other events as before: no process per call
