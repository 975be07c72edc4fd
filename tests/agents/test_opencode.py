"""OpenCode's real CLI (pinned, headless ``opencode run``) obeys hookbus, in a loopback-only namespace.

OpenCode has no external hooks: ``hookbus install opencode`` writes hookbus's plugin into the
project's ``.opencode/plugins/`` (pointed at a real ``hookbus up`` outside, relayed in), and
OpenCode runs against the scripted fake Anthropic Messages API on a socket inside the
namespace (``provider.anthropic.options.baseURL`` in ``OPENCODE_CONFIG_CONTENT``). The policy
is the fleet's, in Claude Code's terms (``Bash(touch forbidden*)``): OpenCode's ``bash`` is
Claude Code's ``Bash`` only through the dialect. Every scenario asserts on what the model
was sent back or on the files the shell command made; the first proves that this headless
setup runs project plugins at all, so none can pass because plugins never loaded.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main as hookbus_main
from tests.agents import central_hooks, fleet
from tests.agents.fake_anthropic import FakeAnthropic, one_tool_call, text, tool_results, user_text
from tests.agents.harness import Completed, LoopbackNetns, base_env, loopback_netns, pinned, serve_http
from tests.conftest import wait_for
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]
SHELL = "bash"
PROMPT_TRIGGER = "please-block-my-prompt"
PROMPT_REASON = "hookbus-prompt-marker: not this prompt"
AFTER_TRIGGER = "please-annotate-the-result"
AFTER_CONTEXT = "hookbus-after-marker: the output was reviewed"


def answer_when(trigger: str, answer: dict[str, Any]) -> str:
    """A central ``command`` handler that prints ``answer`` when its input mentions ``trigger``."""
    program = (
        f"import json, sys; found = {trigger!r} in sys.stdin.read(); print(json.dumps({answer!r} if found else {{}}))"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(program)}"


def write_policy(folder: Path) -> Path:
    """The fleet's policy, plus a prompt block and tool-result context this agent can carry out."""
    policy = fleet.policy()
    block = {"decision": "block", "reason": PROMPT_REASON}
    policy["hooks"]["UserPromptSubmit"].append(
        {"hooks": [{"type": "command", "command": answer_when(PROMPT_TRIGGER, block)}]}
    )
    context = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": AFTER_CONTEXT}}
    policy["hooks"]["PostToolUse"] = [{"hooks": [{"type": "command", "command": answer_when(AFTER_TRIGGER, context)}]}]
    path = folder / "opencode-policy.json"
    path.write_text(json.dumps(policy, indent=2))
    return path


LOCAL_DENY = """export const LocalDeny = async () => ({
  "tool.execute.before": async (input) => {
    if (input.tool === "bash") throw new Error("the local plugin says no")
  },
})
"""


class OpenCodeRun:
    """One namespace, one fake model and one ``hookbus up`` for the module's scenarios."""

    def __init__(self, ns: LoopbackNetns, up: UpProcess, fake: FakeAnthropic, model_port: int, root: Path) -> None:
        self.ns, self.up, self.fake, self.root = ns, up, fake, root
        self.gateway = f"http://127.0.0.1:{ns.forward(up.port)}"
        self.model_url = f"http://127.0.0.1:{model_port}/v1"
        self.binary = pinned("opencode") / "node_modules" / "opencode-linux-x64" / "bin" / "opencode"
        self.runs = 0

    def project(self, *install: str, plugins: dict[str, str] | None = None) -> Path:
        """A new project folder with hookbus installed by ``hookbus install opencode ARGS``."""
        self.runs += 1
        folder = self.root / f"project-{self.runs}"
        (folder / ".opencode" / "plugins").mkdir(parents=True)
        for name, source in (plugins or {}).items():
            (folder / ".opencode" / "plugins" / name).write_text(source)
        if install:
            argv = ["install", "opencode", "--url", self.gateway, "--no-check", *install]
            target = folder / ".opencode" / "plugins" / "hookbus.js"
            assert hookbus_main([*argv, "--settings-file", str(target)]) == 0
        return folder

    def env(self, token: str, **more: str) -> dict[str, str]:
        """The environment of one OpenCode run: a throwaway home, the fake model, no network fetches."""
        config = {
            "model": "anthropic/claude-sonnet-4-5",
            "provider": {"anthropic": {"options": {"baseURL": self.model_url, "apiKey": "sk-fake"}}},
            "permission": {"*": "allow"},
            "autoupdate": False,
            "share": "disabled",
        }
        home = self.root / "home"
        env = base_env(
            home,
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_DATA_HOME=str(home / ".local" / "share"),
            XDG_CACHE_HOME=str(home / ".cache"),
            XDG_STATE_HOME=str(home / ".local" / "state"),
            OPENCODE_CONFIG_CONTENT=json.dumps(config),
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_SHARE="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
            OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
            OPENCODE_DISABLE_CLAUDE_CODE="1",
            npm_config_offline="true",
            HOOKBUS_TOKEN=token,
        )
        env.update(more)
        return env

    def run(self, folder: Path, prompt: str, *, token: str = fleet.TOKEN, **more: str) -> Completed:
        env = self.env(token, **more)
        result = self.ns.run([str(self.binary), "run", "--format", "json", prompt], env=env, cwd=folder, timeout_s=120)
        assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
        return result


@pytest.fixture(scope="module")
def opencode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenCodeRun]:
    root = tmp_path_factory.mktemp("opencode")
    (root / "home").mkdir()
    fake = FakeAnthropic()
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, write_policy(root), {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield OpenCodeRun(ns, up, fake, model_port, root)


def shell(command: str) -> dict[str, str]:
    return {"command": command, "description": "as the test asks"}


def last_result(fake: FakeAnthropic) -> str:
    """What the model was told its one tool call returned."""
    for request in reversed(fake.requests):
        found = tool_results(request)
        if found:
            return next(iter(found.values()))
    raise AssertionError(f"the model never got a tool result: {len(fake.requests)} requests")


def records_of(opencode: OpenCodeRun, folder: Path, decision: str | None = None) -> list[dict[str, Any]]:
    """The decision-log records of runs in ``folder`` (with ``decision`` when given)."""
    return [
        r
        for r in fleet.records(opencode.up)
        if (decision is None or r.get("decision") == decision) and str(folder) in json.dumps(r.get("input"))
    ]


def test_headless_opencode_runs_project_plugins_at_all(opencode: OpenCodeRun) -> None:
    folder = opencode.project(plugins={"local-deny.js": LOCAL_DENY})
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    opencode.run(folder, "make the file")
    assert "the local plugin says no" in last_result(opencode.fake)
    assert not (folder / "allowed.txt").exists()


def test_a_central_deny_stops_the_command_the_model_reads_why_and_the_log_names_opencode(
    opencode: OpenCodeRun,
) -> None:
    folder = opencode.project("--events", "PreToolUse")
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    opencode.run(folder, "make the file")
    assert fleet.REASON in last_result(opencode.fake)
    assert not (folder / "forbidden.txt").exists()
    wait_for(lambda: bool(records_of(opencode, folder, "deny")), timeout_s=30, interval_s=0.1)
    record = records_of(opencode, folder, "deny")[-1]
    assert (record["agent"], record["event"], record["tool_name"]) == ("opencode", "PreToolUse", "Bash")
    assert record["input"]["agent_tool_name"] == SHELL
    assert record["input"]["agent_event_name"] == "tool.execute.before"
    assert record["input"]["tool_input"]["command"] == fleet.DENIED


def test_an_allow_lets_the_command_run_with_every_event_posted(opencode: OpenCodeRun) -> None:
    folder = opencode.project("--timeout", "20")
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    opencode.run(folder, "make the file")
    assert (folder / "allowed.txt").exists()
    wait_for(lambda: bool(records_of(opencode, folder, "allow")), timeout_s=30, interval_s=0.1)
    assert records_of(opencode, folder, "allow")[-1]["input"]["tool_input"]["command"] == fleet.ALLOWED
    wait_for(
        lambda: (
            {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse"}
            <= {r["event"] for r in records_of(opencode, folder)}
        ),
        timeout_s=30,
        interval_s=0.1,
    )


def test_a_central_rewrite_runs_the_rewritten_command(opencode: OpenCodeRun) -> None:
    folder = opencode.project("--events", "PreToolUse")
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.TO_REWRITE)))
    opencode.run(folder, "make the file")
    assert (folder / "rewritten.txt").exists()
    assert not (folder / "rewrite-me.txt").exists()


def test_central_context_reaches_the_model_with_the_prompt(opencode: OpenCodeRun) -> None:
    folder = opencode.project("--events", "UserPromptSubmit")
    opencode.fake.reset(lambda request: text("Noted."))
    opencode.run(folder, f"hello {central_hooks.CONTEXT_TRIGGER}")
    conversations = [user_text(r) for r in opencode.fake.requests if r.get("tools")]
    assert conversations and central_hooks.CONTEXT in conversations[0]


def test_a_central_stop_block_is_recorded_but_opencode_cannot_keep_working(opencode: OpenCodeRun) -> None:
    folder = opencode.project("--events", "Stop", "SessionStart", "StopFailure", "SessionEnd")
    opencode.fake.reset(lambda request: text(f"Finished; {central_hooks.STOP_TRIGGER}"))
    opencode.run(folder, "say you are done")
    conversations = [r for r in opencode.fake.requests if r.get("tools")]
    assert len(conversations) == 1  # no second turn: the block is not carried out
    assert central_hooks.STOP_REASON not in user_text(conversations[0])

    def stops() -> list[dict[str, Any]]:
        return [r for r in records_of(opencode, folder) if r["event"] == "Stop"]

    wait_for(stops, timeout_s=30, interval_s=0.1)
    record = stops()[-1]
    assert (record["event"], record["input"]["agent_event_name"]) == ("Stop", "session.idle")
    assert central_hooks.STOP_TRIGGER in record["input"]["last_assistant_message"]
    assert record["decision"] == "block"  # the policy blocked the Stop; OpenCode cannot carry it out


def test_a_wrong_token_fails_open_and_blocks_when_installed_fail_closed(opencode: OpenCodeRun) -> None:
    folder = opencode.project("--events", "PreToolUse")
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    opencode.run(folder, "make the file", token="wrong")
    assert (folder / "forbidden.txt").exists()  # a 401 fails open

    closed = opencode.project("--events", "PreToolUse", "--fail-closed")
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    opencode.run(closed, "make the file", token="wrong")
    assert "failing closed" in last_result(opencode.fake)
    assert not (closed / "allowed.txt").exists()


def test_user_and_managed_scope_installs_land_where_opencode_loads_them(
    opencode: OpenCodeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_home, managed = opencode.root / "xdg-config", opencode.root / "etc-opencode"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.delenv("OPENCODE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("OPENCODE_TEST_MANAGED_CONFIG_DIR", str(managed))
    base = ["install", "opencode", "--url", opencode.gateway, "--no-check"]
    assert hookbus_main([*base, "--scope", "user", "--events", "PreToolUse"]) == 0
    assert hookbus_main([*base, "--scope", "managed", "--events", "UserPromptSubmit"]) == 0
    assert (config_home / "opencode" / "plugins" / "hookbus.js").is_file()
    assert json.loads((managed / "opencode.json").read_text())["plugin"] == [
        (managed / "plugins" / "hookbus.js").resolve().as_uri()
    ]
    folder = opencode.project()  # no project plugin at all
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    opencode.run(
        folder,
        f"make the file {central_hooks.CONTEXT_TRIGGER}",
        XDG_CONFIG_HOME=str(config_home),
        OPENCODE_TEST_MANAGED_CONFIG_DIR=str(managed),
    )
    assert fleet.REASON in last_result(opencode.fake)  # the user-scope plugin ran
    conversations = [user_text(r) for r in opencode.fake.requests if r.get("tools")]
    assert central_hooks.CONTEXT in conversations[0]  # so did the managed one
    assert not (folder / "forbidden.txt").exists()


def test_a_central_prompt_block_keeps_the_prompt_from_the_model(opencode: OpenCodeRun) -> None:
    folder = opencode.project("--events", "UserPromptSubmit")
    opencode.fake.reset(lambda request: text("Noted."))
    result = opencode.ns.run(
        [str(opencode.binary), "run", "--format", "json", f"hello {PROMPT_TRIGGER}"],
        env=opencode.env(fleet.TOKEN),
        cwd=folder,
        timeout_s=120,
    )
    assert not [r for r in opencode.fake.requests if PROMPT_TRIGGER in user_text(r)]
    # OpenCode 1.18.33 ends the run on the plugin's throw and shows a generic error, not the reason.
    assert result.returncode == 1 and '"type":"error"' in result.stdout
    wait_for(lambda: bool(records_of(opencode, folder, "block")), timeout_s=30, interval_s=0.1)
    assert records_of(opencode, folder, "block")[-1]["event"] == "UserPromptSubmit"


def test_central_context_is_appended_to_the_tool_result_the_model_reads(opencode: OpenCodeRun) -> None:
    folder = opencode.project("--events", "PostToolUse")
    opencode.fake.reset(one_tool_call(SHELL, shell(f"echo {AFTER_TRIGGER}")))
    opencode.run(folder, "run it")
    seen = last_result(opencode.fake)
    assert AFTER_TRIGGER in seen and AFTER_CONTEXT in seen


def test_a_gateway_that_does_not_answer_in_time_fails_open_or_closed_by_the_deadline(opencode: OpenCodeRun) -> None:
    silent = opencode.ns.listen()  # accepts connections (the backlog) and never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    target = ".opencode/plugins/hookbus.js"
    folder = opencode.project()
    argv = ["install", "opencode", "--url", url, "--no-check", "--events", "PreToolUse", "--timeout", "1"]
    assert hookbus_main([*argv, "--settings-file", str(folder / target)]) == 0
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    opencode.run(folder, "make the file")
    assert (folder / "forbidden.txt").exists()  # open: the deadline passed, the tool ran

    closed = opencode.project()
    assert hookbus_main([*argv, "--fail-closed", "--settings-file", str(closed / target)]) == 0
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.ALLOWED)))
    opencode.run(closed, "make the file")
    assert "no answer within 1000 ms" in last_result(opencode.fake)
    assert not (closed / "allowed.txt").exists()


def test_a_user_install_under_opencode_config_dir_is_loaded_from_there(
    opencode: OpenCodeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    custom = opencode.root / "opencode-config-dir"
    monkeypatch.setenv("OPENCODE_CONFIG_DIR", str(custom))
    argv = ["install", "opencode", "--url", opencode.gateway, "--no-check", "--scope", "user", "--events", "PreToolUse"]
    assert hookbus_main(argv) == 0
    assert (custom / "plugins" / "hookbus.js").is_file()
    folder = opencode.project()
    opencode.fake.reset(one_tool_call(SHELL, shell(fleet.DENIED)))
    opencode.run(folder, "make the file", OPENCODE_CONFIG_DIR=str(custom))
    assert fleet.REASON in last_result(opencode.fake)
    assert not (folder / "forbidden.txt").exists()
