"""Factory Droid's real CLI (pinned, headless ``droid exec``) obeys hookbus, in a loopback-only namespace.

Droid runs with a BYOK custom model (``provider: anthropic``) whose ``baseUrl`` is the scripted
fake Anthropic Messages API on a socket inside the namespace, no Factory login, and
``FACTORY_AIRGAP_ENABLED`` so it calls nothing home. Its hooks are what ``hookbus install
droid`` writes, pointed at a real ``hookbus up`` outside (relayed in). The policy is the
fleet's, in Claude Code's terms (``Bash(touch forbidden*)``): Droid's ``Execute`` is Claude
Code's ``Bash`` only through the dialect. ``droid exec`` sends no UserPromptSubmit, so the
fleet's context handler runs on SessionStart here too, triggered by the project folder's name
(SessionStart's ``cwd``), and so is the Stop handler's, as Droid's Stop input carries no
``last_assistant_message``. Every scenario asserts on what the model was sent back or on the
files the shell command made, so none can pass because hooks never ran; the first proves
that this headless setup runs project hooks at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main as hookbus_main
from tests.agents import central_hooks, fleet
from tests.agents.fake_anthropic import (
    MODEL,
    FakeAnthropic,
    one_tool_call,
    text,
    tool_calls,
    tool_results,
    user_text,
)
from tests.agents.harness import Completed, LoopbackNetns, base_env, loopback_netns, pinned, serve_http
from tests.conftest import wait_for
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]
SHELL = "Execute"
FILE_REASON = "hookbus droid test: protected file"


def policy() -> dict[str, Any]:
    """The fleet's policy, with its context handler on SessionStart too (Droid's headless context event)."""
    document = fleet.policy()
    context = {"hooks": [{"type": "command", "command": central_hooks.command("context")}]}
    document["hooks"]["SessionStart"] = [context]
    document["hooks"]["PostToolUse"] = [context]
    files = {"type": "rule", "reason": FILE_REASON, "deny": ["Edit(protected.txt)", "Edit(guarded.txt)"]}
    asks = {"type": "rule", "reason": "hookbus droid test: sure?", "ask": ["Edit(ask-me.txt)"]}
    document["hooks"]["PreToolUse"].append({"matcher": "Write|Edit", "hooks": [files, asks]})
    return document


class Droid:
    """One namespace, one fake model and one ``hookbus up`` for the module's scenarios."""

    def __init__(self, ns: LoopbackNetns, up: UpProcess, fake: FakeAnthropic, model_port: int, root: Path) -> None:
        self.ns, self.up, self.fake, self.root = ns, up, fake, root
        self.gateway = f"http://127.0.0.1:{ns.forward(up.port)}"
        self.droid = pinned("droid") / "node_modules" / "@factory" / "cli-linux-x64" / "bin" / "droid"
        self.model_port = model_port
        self.home = self.factory_home("home", model_port)
        self.runs = 0

    def factory_home(self, name: str, model_port: int) -> Path:
        """A Factory home (``$FACTORY_HOME_OVERRIDE``) whose settings name the fake model."""
        home = self.root / name
        (home / ".factory").mkdir(parents=True)
        model = {
            "model": MODEL,
            "displayName": "fake",
            "baseUrl": f"http://127.0.0.1:{model_port}",
            "apiKey": "sk-fake",
            "provider": "anthropic",
        }
        settings = {"customModels": [model], "enableDroidShield": False}
        (home / ".factory" / "settings.json").write_text(json.dumps(settings))
        return home

    def project(self, *install: str, hooks: dict[str, Any] | None = None, name: str = "") -> Path:
        """A new project folder with hookbus installed by ``hookbus install droid ARGS`` (run there)."""
        self.runs += 1
        folder = self.root / f"project-{self.runs}{name}"
        (folder / ".factory").mkdir(parents=True)
        if hooks is not None:
            (folder / ".factory" / "hooks.json").write_text(json.dumps(hooks))
        if install:
            hooks_file = str(folder / ".factory" / "hooks.json")
            argv = ["install", "droid", "--settings-file", hooks_file, "--url", self.gateway, "--no-check", *install]
            assert hookbus_main(argv) == 0
        return folder

    def run(self, folder: Path, prompt: str, *, token: str = fleet.TOKEN, auto: str = "high", **more: str) -> Completed:
        env = base_env(
            self.root / "os-home",
            FACTORY_HOME_OVERRIDE=str(self.home),
            FACTORY_AIRGAP_ENABLED="true",
            HOOKBUS_TOKEN=token,
        )
        env.update(more)
        argv = [str(self.droid), "exec", "--auto", auto, "-m", "custom:fake-0", "-o", "json", prompt]
        result = self.ns.run(argv, env=env, cwd=folder, timeout_s=120)
        assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
        return result


@pytest.fixture(scope="module")
def droid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Droid]:
    root = tmp_path_factory.mktemp("droid")
    (root / "os-home").mkdir()
    (root / "policy.json").write_text(json.dumps(policy()))
    fake = FakeAnthropic()
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, root / "policy.json", {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield Droid(ns, up, fake, model_port, root)


def shell(command: str, risk: str = "low") -> dict[str, str]:
    """Execute's input: Droid rejects a call without ``summary``, ``riskLevel`` and ``riskLevelReason``."""
    return {"command": command, "summary": "Run a test command", "riskLevel": risk, "riskLevelReason": "a test"}


def last_result(fake: FakeAnthropic, call_id: str = "toolu_fake_1") -> str:
    """What the model was told the call ``call_id`` returned (from the last request that has it)."""
    for request in reversed(fake.requests):
        if call_id in (found := tool_results(request)):
            return found[call_id]
    raise AssertionError(f"the model never got the result of {call_id}: {len(fake.requests)} requests")


def records_of(droid: Droid, folder: Path, decision: str | None = None) -> list[dict[str, Any]]:
    """The decision-log records of runs in ``folder`` (with ``decision`` when given)."""
    return [
        r
        for r in fleet.records(droid.up)
        if (decision is None or r.get("decision") == decision) and str(folder) in json.dumps(r.get("input"))
    ]


def test_headless_droid_runs_project_hooks_at_all(droid: Droid) -> None:
    local_deny = {"type": "command", "command": "cat >/dev/null; echo 'the local hook says no' >&2; exit 2"}
    folder = droid.project(hooks={"PreToolUse": [{"matcher": SHELL, "hooks": [local_deny]}]})
    droid.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    droid.run(folder, "make the file")
    assert "the local hook says no" in last_result(droid.fake)
    assert not (folder / "allowed.txt").exists()


def test_a_central_deny_stops_the_command_the_model_reads_why_and_the_log_names_droid(droid: Droid) -> None:
    folder = droid.project("--events", "PreToolUse")
    droid.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    droid.run(folder, "make the file")
    assert last_result(droid.fake).startswith(f"Error: {fleet.REASON}")
    assert not (folder / "forbidden.txt").exists()
    wait_for(lambda: bool(records_of(droid, folder, "deny")), timeout_s=30, interval_s=0.1)
    record = records_of(droid, folder, "deny")[-1]
    assert (record["agent"], record["event"], record["tool_name"]) == ("droid", "PreToolUse", "Bash")
    assert (record["input"]["agent_tool_name"], record["input"]["tool_input"]["command"]) == (SHELL, fleet.DENIED)
    assert (record["input"]["permission_mode"], record["input"]["droid_permission_mode"]) == ("auto", "auto-high")


def test_an_allow_runs_the_command_above_droids_own_autonomy_level(droid: Droid) -> None:
    folder = droid.project("--timeout", "10")  # every default event
    droid.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED, risk="high")))
    result = droid.run(folder, "make the file", auto="low")  # without the allow: "insufficient permission", exit 1
    assert json.loads(result.stdout)["is_error"] is False
    logs = "\n".join(p.read_text(errors="replace") for p in (droid.home / ".factory" / "logs").glob("*"))
    assert logs.strip()  # Droid logs there, so the check below can fail
    ignored = [line for line in logs.splitlines() if "Ignoring unknown hook event" in line and str(folder) in line]
    assert ignored == []  # Droid knows every event name the installer writes
    assert (folder / "allowed.txt").exists()
    wait_for(lambda: bool(records_of(droid, folder, "allow")), timeout_s=30, interval_s=0.1)
    assert records_of(droid, folder, "allow")[-1]["input"]["tool_input"]["command"] == fleet.ALLOWED
    wait_for(lambda: "SessionEnd" in {r["event"] for r in records_of(droid, folder)}, timeout_s=30, interval_s=0.1)
    events = {r["event"] for r in records_of(droid, folder)}
    assert {"SessionStart", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"} <= events


def test_file_tools_meet_claude_codes_write_and_edit_rules_and_context_follows_a_result(droid: Droid) -> None:
    folder = droid.project("--events", "PreToolUse", "PostToolUse")
    (folder / "guarded.txt").write_text("x")
    droid.fake.reset(
        tool_calls(
            ("Create", {"file_path": str(folder / "protected.txt"), "content": "x"}),
            ("Edit", {"file_path": str(folder / "guarded.txt"), "old_str": "x", "new_str": "y"}),
            ("Create", {"file_path": str(folder / "ask-me.txt"), "content": "x"}),
            ("Create", {"file_path": str(folder / "fine.txt"), "content": central_hooks.CONTEXT_TRIGGER}),
        )
    )
    droid.run(folder, "write the files")
    assert last_result(droid.fake, "toolu_fake_1").startswith(f"Error: {FILE_REASON}")
    assert last_result(droid.fake, "toolu_fake_2").startswith(f"Error: {FILE_REASON}")
    assert "which Factory Droid cannot do here: denied instead" in last_result(droid.fake, "toolu_fake_3")
    assert not (folder / "protected.txt").exists() and not (folder / "ask-me.txt").exists()
    assert (folder / "guarded.txt").read_text() == "x" and (folder / "fine.txt").exists()
    assert central_hooks.CONTEXT in user_text(droid.fake.requests[-1])  # PostToolUse context, after fine.txt
    assert central_hooks.CONTEXT not in user_text(droid.fake.requests[0])
    wait_for(lambda: len(records_of(droid, folder, "deny")) >= 2, timeout_s=30, interval_s=0.1)
    tools = {(r["tool_name"], r["input"]["agent_tool_name"]) for r in records_of(droid, folder, "deny")}
    assert tools == {("Write", "Create"), ("Edit", "Edit")}


def test_a_central_rewrite_runs_the_rewritten_command(droid: Droid) -> None:
    folder = droid.project("--events", "PreToolUse")
    droid.fake.reset(one_tool_call(SHELL, shell(fleet.TO_REWRITE)))
    droid.run(folder, "make the file")
    assert (folder / "rewritten.txt").exists()  # the call the policy wanted ran
    assert not (folder / "rewrite-me.txt").exists()  # the original never did


def test_a_central_stop_block_keeps_the_agent_working(droid: Droid) -> None:
    # Droid's Stop input has no last_assistant_message: the trigger is in its cwd
    folder = droid.project("--events", "Stop", name=f"-{central_hooks.STOP_TRIGGER}")
    droid.fake.reset(lambda request: text("Finished."))
    droid.run(folder, "say you are done")
    assert len(droid.fake.requests) >= 2
    assert central_hooks.STOP_REASON in user_text(droid.fake.requests[1])
    assert central_hooks.STOP_REASON not in user_text(droid.fake.requests[0])


def test_central_context_on_session_start_reaches_the_model(droid: Droid) -> None:
    folder = droid.project("--events", "SessionStart", name=f"-{central_hooks.CONTEXT_TRIGGER}")
    droid.fake.reset(lambda request: text("Noted."))
    droid.run(folder, "hello")
    assert central_hooks.CONTEXT in user_text(droid.fake.requests[0])
    plain = droid.project("--events", "SessionStart")
    droid.fake.reset(lambda request: text("Noted."))
    droid.run(plain, "hello")
    assert central_hooks.CONTEXT not in user_text(droid.fake.requests[0])


def test_a_wrong_token_fails_open_and_blocks_when_installed_fail_closed(droid: Droid) -> None:
    folder = droid.project("--events", "PreToolUse")
    droid.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    droid.run(folder, "make the file", token="wrong")
    assert (folder / "forbidden.txt").exists()  # the shim fails open on a 401

    closed = droid.project("--events", "PreToolUse", "--fail-closed")
    droid.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    droid.run(closed, "make the file", token="wrong")
    assert "failing closed" in last_result(droid.fake)
    assert not (closed / "allowed.txt").exists()


def test_user_and_managed_scope_installs_land_where_droid_reads_them(
    droid: Droid, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = droid.factory_home("user-scope-home", droid.model_port)
    managed = droid.root / "etc-factory" / "settings.json"
    monkeypatch.setenv("FACTORY_HOME_OVERRIDE", str(home))
    monkeypatch.setenv("FACTORY_ORG_MANAGED_SETTINGS_LOCAL_PATH", str(managed))
    base = ["install", "droid", "--url", droid.gateway, "--no-check"]
    assert hookbus_main([*base, "--scope", "user", "--events", "PreToolUse"]) == 0
    assert hookbus_main([*base, "--scope", "managed", "--events", "SessionStart"]) == 0
    assert (home / ".factory" / "hooks.json").exists() and "hooks" in json.loads(managed.read_text())
    folder = droid.project(name=f"-{central_hooks.CONTEXT_TRIGGER}")  # no project hooks at all
    droid.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    droid.run(
        folder, "make the file", FACTORY_HOME_OVERRIDE=str(home), FACTORY_ORG_MANAGED_SETTINGS_LOCAL_PATH=str(managed)
    )
    assert fleet.REASON in last_result(droid.fake)  # the user-scope PreToolUse hook ran
    assert central_hooks.CONTEXT in user_text(droid.fake.requests[0])  # so did the managed one
    assert not (folder / "forbidden.txt").exists()
