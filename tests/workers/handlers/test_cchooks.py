"""Hooks written with ``cchooks`` (a popular Claude Code hook SDK on PyPI) run centrally, unmodified.

The hook scripts are not written here: they are the code blocks of cchooks' own README, read
from the installed package's metadata (so they are exactly what its docs show). Each runs as
a central ``command`` hook through a live platform; the gateway's reply must be what Claude
Code would have acted on had it run the script locally.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BusProbe, async_wait_for

pytest.importorskip("cchooks", reason="cchooks is in the 'dev' extra: pip install -e '.[dev]'")


def readme_example(heading: str) -> str:
    """The first ```python block after ``### <heading>`` in cchooks' README (its PyPI description)."""
    readme = importlib.metadata.metadata("cchooks").get_payload()  # type: ignore[attr-defined]
    match = re.search(rf"^### {re.escape(heading)}\n.*?```python\n(.*?)```", readme, re.S | re.M)
    assert match, f"cchooks' README has no '{heading}' example any more"
    return str(match.group(1))


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    """The README's hooks as files, and the shell command that runs each one."""
    commands = {}
    for name, heading in (
        ("guard", "PreToolUse (Security Guard)"),
        ("stop", "Stop (Task Manager)"),
        ("prompt", "UserPromptSubmit (Prompt Filter)"),
    ):
        path = tmp_path / f"{name}.py"
        path.write_text(readme_example(heading))
        commands[name] = f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"
    return commands


def policy(commands: dict[str, str]) -> str:
    return f"""
hookbus: {{deadlineSeconds: 10.0}}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks: [{{type: command, command: {commands["guard"]!r}}}]
  Stop:
    - hooks: [{{type: command, command: {commands["stop"]!r}}}]
  UserPromptSubmit:
    - hooks: [{{type: command, command: {commands["prompt"]!r}}}]
"""


def event(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "hook_event_name": name,
        "session_id": f"cchooks-{name}",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "permission_mode": "default",
        **fields,
    }


def test_the_readme_examples_are_unmodified_cchooks_code(scripts: dict[str, str]) -> None:
    guard = readme_example("PreToolUse (Security Guard)")
    assert "from cchooks import create_context, PreToolUseContext" in guard and "c.output.deny(" in guard
    assert "c.output.prevent(" in readme_example("Stop (Task Manager)")


async def test_pretooluse_deny_and_allow(platform: Callable[..., Any], bus: BusProbe, scripts: dict[str, str]) -> None:
    async with platform(policy(scripts)) as p:
        denied = await p.post(
            event("PreToolUse", tool_name="Bash", tool_input={"command": "rm -rf /tmp/x"}, tool_use_id="t1")
        )
        allowed = await p.post(event("PreToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_use_id="t2"))
    assert denied.status_code == 200 and denied.headers["X-Hookbus-Outcome"] == "decided"
    body = denied.json()
    assert body["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "You should not execute this command: System protection: rm -rf blocked",
    }
    assert body["systemMessage"].endswith("This command could permanently delete files. Please use caution.")
    assert allowed.json()["hookSpecificOutput"]["permissionDecision"] == "allow"
    record = await async_wait_for(lambda: bus.record(denied.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    assert record.decision == "deny"


async def test_stop_block_honours_stop_hook_active(platform: Callable[..., Any], scripts: dict[str, str]) -> None:
    async with platform(policy(scripts)) as p:
        first = await p.post(event("Stop", stop_hook_active=False, last_assistant_message="done"))
        again = await p.post(event("Stop", stop_hook_active=True, last_assistant_message="done"))
    assert first.json()["decision"] == "block"
    assert first.json()["reason"] == "Hey Claude, you should try to do more works!"
    assert first.json()["systemMessage"].startswith("Claude is working on important tasks.")
    assert "decision" not in again.json()


async def test_user_prompt_block(platform: Callable[..., Any], scripts: dict[str, str]) -> None:
    async with platform(policy(scripts)) as p:
        blocked = await p.post(event("UserPromptSubmit", prompt="my password is hunter2"))
        fine = await p.post(event("UserPromptSubmit", prompt="refactor the parser"))
    assert blocked.json()["decision"] == "block"
    assert blocked.json()["reason"] == "Security: Prompt contains sensitive data"
    assert "decision" not in fine.json()
