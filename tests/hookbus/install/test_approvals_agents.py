"""``hookbus install AGENT --approvals`` beyond Claude Code: the events that wait fail closed, with a long timeout."""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.runtime.settings import Tokens
from hookbus.cli import main
from tests.conftest import DENY_RM

URL = "http://127.0.0.1:8787"


def _hooks(node: Any) -> Iterator[tuple[str, float]]:
    """Every (shim command, agent timeout) in a written config, wherever the agent keeps them."""
    if isinstance(node, list):
        for item in node:
            yield from _hooks(item)
    elif isinstance(node, dict):
        action = node.get("action")
        command = (
            node.get("command") or node.get("bash") or (action.get("command") if isinstance(action, dict) else None)
        )
        timeout = node.get("timeout", node.get("timeoutSec"))
        if isinstance(command, str) and timeout is not None:
            if command.endswith(".sh"):  # Auggie runs a script that runs the shim
                command = Path(command).read_text().splitlines()[-1]
            if " hook " in command:
                yield command, float(timeout)
                return
        for value in node.values():
            yield from _hooks(value)


def _shim_timeout_s(command: str) -> float | None:
    words = shlex.split(command.replace("exec ", "", 1))
    return float(words[words.index("--timeout") + 1]) if "--timeout" in words else None


@pytest.mark.parametrize(
    ("agent", "held_timeout"),
    [("copilot", 900), ("cursor", 900), ("kiro", 900), ("droid", 900), ("auggie", 900_000)],
)
def test_the_events_that_wait_get_the_fail_closed_shim_and_the_long_timeout(
    agent: str, held_timeout: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HOOKBUS_URL", raising=False)
    path = tmp_path / "settings.json"
    argv = ["install", agent, "--no-check", "--url", URL, "--settings-file", str(path), "--hook-command", "/x/hb"]
    assert main([*argv, "--approvals", "900"]) == 0, agent
    found = list(_hooks(json.loads(path.read_text())))
    held = [(command, timeout) for command, timeout in found if "--fail-closed" in command]
    others = [(command, timeout) for command, timeout in found if "--fail-closed" not in command]
    assert held and others, found  # the events that wait, and the rest as before
    for command, timeout in held:
        assert timeout == held_timeout and _shim_timeout_s(command) == 720, command  # answers before the agent
    for command, timeout in others:
        assert timeout < held_timeout and (_shim_timeout_s(command) or 5) <= 5, command


@pytest.mark.parametrize("agent", ["cline", "opencode", "windsurf"])
def test_an_agent_that_cannot_wait_is_one_clear_line(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "hooks.json"
    assert main(["install", agent, "--no-check", "--url", URL, "--settings-file", str(path), "--approvals"]) == 1
    err = capsys.readouterr().err
    assert "--approvals" in err and "retry" in err and err.count("\n") == 1
    assert not path.exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("agent", ["gemini", "qwen", "copilot", "cursor", "kiro", "droid", "auggie"])
async def test_an_approvals_install_passes_its_check_against_a_live_gateway(
    agent: str,
    platform: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HOOKBUS_URL", raising=False)
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-1")
    path = tmp_path / "settings.json"
    async with platform(DENY_RM, tokens=Tokens.parse("fleet:tok-1")) as p:
        accepted = "reachable, token accepted as tenant fleet"
        argv = ["install", agent, "--settings-file", str(path), "--url", p.url]
        assert await asyncio.to_thread(main, [*argv, "--approvals"]) == 0
        assert capsys.readouterr().out.splitlines()[-1].endswith(accepted)
        assert any("--fail-closed" in command for command, _ in _hooks(json.loads(path.read_text())))
        assert await asyncio.to_thread(main, [*argv, "--check"]) == 0
        assert capsys.readouterr().out.splitlines()[-1].endswith(accepted)
