"""Cline's real CLI (pinned ``cline``, headless ``cline --json``) obeys hookbus, in a loopback-only namespace.

The CLI (a compiled binary from ``@cline/cli-linux-x64``) runs against the scripted fake
Anthropic Messages API on a socket inside the namespace (``providers.json`` with a
``baseUrl``: ``cline auth -b`` refuses one for anthropic), with the hook scripts ``hookbus
install cline`` writes, pointed at a real ``hookbus up`` outside (relayed in). The policy is
the fleet's, in Claude Code's terms (``Bash(touch forbidden*)``): Cline's ``run_commands`` is
Claude Code's ``Bash`` only through the dialect; a PostToolUse context handler is added.
``CLINE_SESSION_BACKEND_MODE=local`` keeps each run from starting a hub daemon that would
outlive it. Every scenario asserts on what the model was sent back or on the files the
shell command made, so none can pass because hooks never ran; the first proves that this
headless setup runs project hooks at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main as hookbus_main
from tests.agents import central_hooks, fleet
from tests.agents.fake_anthropic import MODEL, FakeAnthropic, one_tool_call, text, user_text
from tests.agents.harness import Completed, LoopbackNetns, base_env, loopback_netns, pinned, serve_http
from tests.conftest import wait_for
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]
SHELL = "run_commands"
#: The shell command whose PostToolUse gets the central context (the handler looks for the trigger).
WITH_CONTEXT = f"echo {central_hooks.CONTEXT_TRIGGER}"
DENIED_FILE = "denied.txt"


def policy(folder: Path) -> Path:
    """The fleet's policy plus a PostToolUse context handler (Cline reads context there) and a
    path rule on Write (Cline's ``editor`` creating a file)."""
    merged = fleet.policy()
    rule = {"type": "rule", "reason": "hookbus: no denied files", "deny": [f"Write(/{folder}/**/{DENIED_FILE})"]}
    merged["hooks"]["PreToolUse"].append({"matcher": "Write|Edit", "hooks": [rule]})
    merged["hooks"]["PostToolUse"] = [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": central_hooks.command("context")}]}
    ]
    path = folder / "cline-policy.json"
    path.write_text(json.dumps(merged, indent=2))
    return path


class Cline:
    """One namespace, one fake model and one ``hookbus up`` for the module's scenarios."""

    def __init__(self, ns: LoopbackNetns, up: UpProcess, fake: FakeAnthropic, model_port: int, root: Path) -> None:
        self.ns, self.up, self.fake, self.root = ns, up, fake, root
        self.gateway = f"http://127.0.0.1:{ns.forward(up.port)}"
        self.model_url = f"http://127.0.0.1:{model_port}/v1"
        self.cli = pinned("cline") / "node_modules" / "@cline" / "cli-linux-x64" / "bin" / "cline"
        self.runs = 0

    def project(self, *install: str) -> tuple[Path, Path]:
        """A new workspace and Cline folder (``CLINE_DIR``), hookbus installed by ``hookbus install cline ARGS``."""
        self.runs += 1
        folder, cline_dir = self.root / f"project-{self.runs}", self.root / f"cline-{self.runs}"
        (folder / ".cline" / "hooks").mkdir(parents=True)
        settings = cline_dir / "data" / "settings"
        settings.mkdir(parents=True)
        provider = {"provider": "anthropic", "apiKey": "sk-fake", "model": MODEL, "baseUrl": self.model_url}
        providers = {"anthropic": {"settings": provider, "updatedAt": "2026-12-01T00:00:00.000Z"}}
        (settings / "providers.json").write_text(json.dumps({"version": 1, "providers": providers}))
        if install:
            target = ["--settings-file", str(folder / ".cline" / "hooks")]
            if "--scope" in install:
                target = []
            code = hookbus_main(["install", "cline", *target, "--url", self.gateway, "--no-check", *install])
            assert code == 0
        return folder, cline_dir

    def run(self, folder: Path, cline_dir: Path, prompt: str, *, token: str = fleet.TOKEN) -> Completed:
        env = base_env(
            self.root / "home", CLINE_DIR=str(cline_dir), CLINE_SESSION_BACKEND_MODE="local", HOOKBUS_TOKEN=token
        )
        argv = [str(self.cli), "--json", "-P", "anthropic", "-m", MODEL, prompt]
        result = self.ns.run(argv, env=env, cwd=folder, timeout_s=120)
        assert result.returncode in (0, 1), result.stderr[-2000:]
        return result


@pytest.fixture(scope="module")
def cline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cline]:
    root = tmp_path_factory.mktemp("cline")
    (root / "home").mkdir()
    fake = FakeAnthropic()
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, policy(root), {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield Cline(ns, up, fake, model_port, root)


def run_result(result: Completed) -> dict[str, Any]:
    """The ``run_result`` line of ``cline --json``'s output."""
    lines: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    found = [line for line in lines if line.get("type") == "run_result"]
    assert found, result.stdout[-2000:]
    return found[-1]


def shell(command: str) -> dict[str, list[str]]:
    return {"commands": [command]}


def records_of(cline: Cline, folder: Path, **match: str) -> list[dict[str, Any]]:
    """The decision-log records of runs in ``folder`` that have ``match``'s values."""
    return [
        r
        for r in fleet.records(cline.up)
        if str(folder) in json.dumps(r.get("input")) and all(r.get(k) == v for k, v in match.items())
    ]


def test_headless_cline_runs_project_hooks_at_all(cline: Cline) -> None:
    folder, cline_dir = cline.project()
    local = folder / ".cline" / "hooks" / "PreToolUse"
    local.write_text('#!/bin/sh\ncat >/dev/null\necho \'{"cancel": true, "errorMessage": "the local hook says no"}\'\n')
    local.chmod(0o755)
    cline.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    result = cline.run(folder, cline_dir, "make the file")
    assert run_result(result)["finishReason"] == "aborted"
    assert not (folder / "allowed.txt").exists()


def test_a_central_deny_stops_the_command_the_model_reads_why_and_the_log_names_cline(cline: Cline) -> None:
    folder, cline_dir = cline.project("--events", "PreToolUse")
    cline.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    result = cline.run(folder, cline_dir, "make the file")
    assert run_result(result)["finishReason"] == "completed"  # only this call was refused
    told = cline.fake.tool_result()
    assert f"hookbus denied this command: {fleet.REASON}" in told
    assert f"hookbus denied the call: {fleet.REASON}" in user_text(cline.fake.requests[-1])
    assert not (folder / "forbidden.txt").exists()
    wait_for(lambda: bool(records_of(cline, folder, decision="deny")), timeout_s=30, interval_s=0.1)
    record = records_of(cline, folder, decision="deny")[-1]
    assert (record["agent"], record["event"], record["tool_name"]) == ("cline", "PreToolUse", "Bash")
    assert (record["input"]["agent_tool_name"], record["input"]["tool_input"]["command"]) == (SHELL, fleet.DENIED)
    assert record["input"]["agent_event_name"] == "tool_call"
    assert record["input"]["session_id"].startswith("conv_")


def test_a_central_deny_of_another_tool_stops_the_task_before_the_call(cline: Cline) -> None:
    folder, cline_dir = cline.project("--events", "PreToolUse")
    cline.fake.reset(one_tool_call("editor", {"path": str(folder / DENIED_FILE), "new_text": "x"}))
    result = cline.run(folder, cline_dir, "write the file")
    assert run_result(result)["finishReason"] == "aborted"  # Cline's cancel: the whole task
    assert not (folder / DENIED_FILE).exists()
    assert "hookbus denied editor: hookbus: no denied files" in (cline_dir / "data" / "logs" / "cline.log").read_text()
    assert all("no denied files" not in user_text(request) for request in cline.fake.requests)  # as documented
    wait_for(lambda: bool(records_of(cline, folder, decision="deny")), timeout_s=30, interval_s=0.1)
    record = records_of(cline, folder, decision="deny")[-1]
    assert (record["tool_name"], record["input"]["agent_tool_name"]) == ("Write", "editor")
    assert record["input"]["tool_input"]["file_path"] == str(folder / DENIED_FILE)


def test_an_allow_lets_the_command_run_from_a_user_scope_install_with_every_event(
    cline: Cline, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, cline_dir = cline.project()
    monkeypatch.setenv("CLINE_DIR", str(cline_dir))
    assert hookbus_main(["install", "cline", "--scope", "user", "--url", cline.gateway, "--no-check"]) == 0
    assert (cline_dir / "hooks" / "PreToolUse").exists()
    cline.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    cline.run(folder, cline_dir, "make the file")
    assert (folder / "allowed.txt").exists()
    wait_for(lambda: bool(records_of(cline, folder, decision="allow")), timeout_s=30, interval_s=0.1)
    assert records_of(cline, folder, decision="allow")[-1]["input"]["tool_input"]["command"] == fleet.ALLOWED

    def events() -> set[str]:
        return {r["event"] for r in records_of(cline, folder)}

    wait_for(lambda: {"SessionStart", "PreToolUse", "PostToolUse", "Stop"} <= events(), timeout_s=30, interval_s=0.2)


def test_a_central_rewrite_runs_the_rewritten_command(cline: Cline) -> None:
    folder, cline_dir = cline.project("--events", "PreToolUse")
    cline.fake.reset(one_tool_call(SHELL, shell(fleet.TO_REWRITE)))
    cline.run(folder, cline_dir, "make the file")
    assert (folder / "rewritten.txt").exists()
    assert not (folder / "rewrite-me.txt").exists()
    assert central_hooks.REWRITTEN in cline.fake.tool_result()


def test_central_context_on_post_tool_use_reaches_the_model(cline: Cline) -> None:
    folder, cline_dir = cline.project("--events", "PreToolUse", "PostToolUse")
    cline.fake.reset(one_tool_call(SHELL, shell(WITH_CONTEXT)))
    cline.run(folder, cline_dir, "say it")
    assert len(cline.fake.requests) == 2
    assert central_hooks.CONTEXT not in user_text(cline.fake.requests[0])
    assert '<hook_context source="PostToolUse"' in user_text(cline.fake.requests[1])
    assert central_hooks.CONTEXT in user_text(cline.fake.requests[1])


def test_a_central_stop_block_is_recorded_but_cline_cannot_keep_working(cline: Cline) -> None:
    folder, cline_dir = cline.project("--events", "TaskComplete")
    cline.fake.reset(lambda request: text(f"Finished; {central_hooks.STOP_TRIGGER}"))
    cline.run(folder, cline_dir, "say you are done")
    wait_for(lambda: bool(records_of(cline, folder, event="Stop", decision="block")), timeout_s=30, interval_s=0.1)
    assert len(cline.fake.requests) == 1  # as declared: TaskComplete runs detached, its answer unread


def test_a_wrong_token_fails_open_and_blocks_when_installed_fail_closed(cline: Cline) -> None:
    folder, cline_dir = cline.project("--events", "PreToolUse")
    cline.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    cline.run(folder, cline_dir, "make the file", token="wrong")
    assert (folder / "forbidden.txt").exists()  # the shim fails open on a 401

    closed, closed_dir = cline.project("--events", "PreToolUse", "--fail-closed")
    cline.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    result = cline.run(closed, closed_dir, "make the file", token="wrong")
    assert run_result(result)["finishReason"] == "aborted"
    assert not (closed / "allowed.txt").exists()
