"""Gemini CLI's real CLI (pinned, headless ``gemini -p``) obeys hookbus, in a loopback-only namespace.

Gemini CLI runs against the scripted fake Gemini API (:mod:`tests.agents.fake_gemini`) on a
socket inside the namespace, with the hooks ``hookbus install gemini`` writes into each
project's ``.gemini/settings.json``, pointed at a real ``hookbus up`` outside (relayed in).
The fleet policy is Claude Code's terms only (``Bash(...)``, ``Edit(...)``); the dialect makes
it apply to ``run_shell_command`` and ``write_file``. Every scenario asserts on what the model
was sent back or on the files the tool made, so none can pass because hooks never ran.

The recipe the CLI needs headless and offline: settings ``security.auth.selectedType:
"gemini-api-key"`` with ``GEMINI_API_KEY`` and ``GOOGLE_GEMINI_BASE_URL`` (the base URL alone
selects an auth type headless mode refuses), the project folder in ``trustedFolders.json``
(an untrusted folder makes a headless run exit 55), ``GEMINI_CLI_HOME`` for an isolated home,
``GEMINI_CLI_NO_RELAUNCH`` so the CLI does not re-spawn itself.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main as hookbus_main
from hookbus.install.gemini import insecure_ancestor
from tests.agents import central_hooks, fleet
from tests.agents.fake_gemini import MODEL, FakeGemini, call, text
from tests.agents.harness import Completed, LoopbackNetns, base_env, cache_dir, loopback_netns, pinned, serve_http
from tests.ci import missing
from tests.conftest import wait_for
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]
WRITE_REASON = "hookbus fleet policy: no writes under secrets/"
#: What the CLI needs to run headless, offline, against the fake (user settings).
USER_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "tools": {"useRipgrep": False},
}


def policy() -> dict[str, Any]:
    """The fleet policy, plus a path rule in Claude Code's terms that must catch ``write_file``, an
    ask, and context at SessionStart and after a shell command when the event mentions the context trigger."""
    document = fleet.policy()
    document["hooks"]["PreToolUse"] += [
        {"matcher": "Write|Edit", "hooks": [{"type": "rule", "reason": WRITE_REASON, "deny": ["Edit(secrets/**)"]}]},
        {
            "matcher": "Bash",
            "hooks": [{"type": "rule", "reason": "hookbus asks first", "ask": ["Bash(touch ask-me*)"]}],
        },
    ]
    document["hooks"]["SessionStart"] = [{"hooks": [{"type": "command", "command": central_hooks.command("context")}]}]
    document["hooks"]["PostToolUse"] = [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": central_hooks.command("context")}]}
    ]
    return document


class Gemini:
    """One namespace, one fake model and one ``hookbus up`` for the module's scenarios."""

    def __init__(self, ns: LoopbackNetns, up: UpProcess, fake: FakeGemini, model_port: int, root: Path) -> None:
        self.ns, self.up, self.fake, self.root = ns, up, fake, root
        self.gateway = f"http://127.0.0.1:{ns.forward(up.port)}"
        self.model_url = f"http://127.0.0.1:{model_port}"
        self.cli = pinned("gemini") / "node_modules" / ".bin" / "gemini"
        self.home = root / "home"
        (self.home / ".gemini").mkdir(parents=True)
        (self.home / ".gemini" / "settings.json").write_text(json.dumps(USER_SETTINGS))
        projects = root / "projects"
        projects.mkdir()
        trusted = {str(projects): "TRUST_FOLDER"}  # and every folder below it
        (self.home / ".gemini" / "trustedFolders.json").write_text(json.dumps(trusted))
        self.projects = projects
        self.runs = 0

    def project(
        self, *install: str, settings: dict[str, Any] | None = None, hookbus: bool = True, name: str = ""
    ) -> Path:
        """A new project folder with ``settings``, and hookbus installed by ``hookbus install gemini ARGS``."""
        self.runs += 1
        folder = self.projects / f"project-{self.runs}{name}"
        (folder / ".gemini").mkdir(parents=True)
        settings_file = folder / ".gemini" / "settings.json"
        if settings is not None:
            settings_file.write_text(json.dumps(settings))
        if hookbus:
            argv = ["install", "gemini", "--settings-file", str(settings_file), "--url", self.gateway, "--no-check"]
            assert hookbus_main([*argv, *install]) == 0
        return folder

    def run(
        self,
        folder: Path,
        prompt: str,
        *replies: dict[str, Any],
        token: str = fleet.TOKEN,
        returncode: int = 0,
        home: Path | None = None,
        **env: str,
    ) -> Completed:
        """One headless run of ``prompt`` with the model answering ``replies`` (then "done.")."""
        self.fake.script(*replies)
        home = home or self.home
        environment = base_env(
            home,
            GEMINI_CLI_HOME=str(home),
            GOOGLE_GEMINI_BASE_URL=self.model_url,
            GEMINI_API_KEY="fake-key",
            GEMINI_CLI_NO_RELAUNCH="true",
            HOOKBUS_TOKEN=token,
            **env,
        )
        argv = [str(self.cli), "-p", prompt, "-m", MODEL, "--yolo", "--output-format", "stream-json"]
        result = self.ns.run(argv, env=environment, cwd=folder, timeout_s=120)
        assert result.returncode == returncode, result.stderr[-2000:]
        if returncode == 0:
            assert self.fake.requests, "the CLI never asked the model"
        return result

    def tool_result(self) -> str:
        """What the model was sent back for its one tool call."""
        (response,) = self.fake.function_responses()
        return json.dumps(response["response"])


@pytest.fixture(scope="module")
def gemini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gemini]:
    root = tmp_path_factory.mktemp("gemini")
    fake = FakeGemini()
    policy_file = root / "policy.json"
    policy_file.write_text(json.dumps(policy(), indent=2))
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, policy_file, {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield Gemini(ns, up, fake, model_port, root)


def shell(command: str) -> dict[str, Any]:
    return call("run_shell_command", command=command, description="as the test asks")


def test_headless_gemini_runs_project_hooks_at_all(gemini: Gemini) -> None:
    local_deny = {
        "type": "command",
        "command": """cat >/dev/null; echo '{"decision": "deny", "reason": "the local hook says no"}'""",
    }
    folder = gemini.project(
        settings={"hooks": {"BeforeTool": [{"matcher": "run_shell_command", "hooks": [local_deny]}]}}, hookbus=False
    )
    gemini.run(folder, "make the file", shell(fleet.ALLOWED))
    assert "Tool execution blocked: the local hook says no" in gemini.tool_result()
    assert not (folder / "allowed.txt").exists()


def test_a_central_deny_stops_the_command_and_the_model_reads_why(gemini: Gemini) -> None:
    folder = gemini.project()  # every default event
    gemini.run(folder, "make the file", shell(fleet.DENIED))
    assert fleet.REASON in gemini.tool_result() and "Tool execution blocked" in gemini.tool_result()
    assert not (folder / "forbidden.txt").exists()


def test_an_allow_lets_the_command_run(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool")
    gemini.run(folder, "make the file", shell(fleet.ALLOWED))
    assert (folder / "allowed.txt").exists() and "blocked" not in gemini.tool_result()


def test_a_claude_path_rule_catches_gemini_write_file(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool")
    gemini.run(folder, "write it", call("write_file", file_path="secrets/key.txt", content="k"))
    assert WRITE_REASON in gemini.tool_result()
    assert not (folder / "secrets" / "key.txt").exists()


def test_a_central_rewrite_runs_the_rewritten_command(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool")
    gemini.run(folder, "make the file", shell(fleet.TO_REWRITE))
    assert (folder / "rewritten.txt").exists() and not (folder / "rewrite-me.txt").exists()
    assert "Tool input parameters were modified by a hook" in gemini.tool_result()


def test_a_central_stop_block_keeps_the_agent_working(gemini: Gemini) -> None:
    folder = gemini.project("--events", "AfterAgent")
    gemini.run(folder, "say you are done", text(f"Finished; {central_hooks.STOP_TRIGGER}"), text("Tests run."))
    assert len(gemini.fake.requests) == 2  # the block sent the agent back to work once
    assert central_hooks.STOP_REASON in gemini.fake.user_texts()


def test_central_context_reaches_the_model(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeAgent")
    gemini.run(folder, f"hello {central_hooks.CONTEXT_TRIGGER}", text("Noted."))
    assert central_hooks.CONTEXT in json.dumps(gemini.fake.requests[0])


def test_session_start_context_reaches_the_first_prompt(gemini: Gemini) -> None:
    folder = gemini.project("--events", "SessionStart", name=f"-{central_hooks.CONTEXT_TRIGGER}")  # in its cwd
    gemini.run(folder, "hello", text("Noted."))
    first = json.dumps(gemini.fake.requests[0])
    assert f"<hook_context>{central_hooks.CONTEXT}</hook_context>" in first


def test_context_after_a_tool_is_appended_to_its_result(gemini: Gemini) -> None:
    folder = gemini.project("--events", "AfterTool")
    gemini.run(folder, "echo it", shell(f"echo {central_hooks.CONTEXT_TRIGGER}"))
    assert central_hooks.CONTEXT in gemini.tool_result() and "<hook_context>" in gemini.tool_result()


def test_an_ask_never_runs_the_tool_headless(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool")
    gemini.run(folder, "make the file", shell("touch ask-me.txt"))
    assert not (folder / "ask-me.txt").exists()  # Gemini's confirmation cannot be shown with -p: no run, no allow
    assert gemini.fake.function_responses() == []


def test_a_wrong_token_fails_open_and_blocks_when_installed_fail_closed(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool")
    gemini.run(folder, "make the file", shell(fleet.DENIED), token="wrong")
    assert (folder / "forbidden.txt").exists()  # the gateway's 401: the shim answers {} and the tool runs

    closed = gemini.project("--events", "BeforeTool", "--fail-closed")
    gemini.run(closed, "make the file", shell(fleet.ALLOWED), token="wrong")
    assert "401" in gemini.tool_result() and "failing closed" in gemini.tool_result()
    assert not (closed / "allowed.txt").exists()


def test_a_user_install_follows_gemini_cli_home(gemini: Gemini, monkeypatch: pytest.MonkeyPatch) -> None:
    home = gemini.root / "another-home"
    shutil.copytree(gemini.home / ".gemini", home / ".gemini", ignore=shutil.ignore_patterns("tmp", "*.bak"))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(home))
    argv = ["install", "gemini", "--scope", "user", "--url", gemini.gateway, "--no-check", "--events", "BeforeTool"]
    assert hookbus_main(argv) == 0
    folder = gemini.project(hookbus=False)
    gemini.run(folder, "make the file", shell(fleet.DENIED), home=home)
    assert fleet.REASON in gemini.tool_result() and not (folder / "forbidden.txt").exists()


@pytest.fixture
def system_settings() -> Iterator[Path]:
    """A system settings path Gemini accepts: it and every folder above it root's, not writable by others."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="gemini-system-", dir=cache_dir()))
    try:
        os.chmod(folder, 0o755)
        if insecure_ancestor(folder) is not None:
            missing(
                f"no folder Gemini CLI would read system settings from: {insecure_ancestor(folder)} is unsafe to it"
            )
        yield folder / "settings.json"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_managed_install_reaches_every_project(
    gemini: Gemini, system_settings: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH", str(system_settings))
    argv = ["install", "gemini", "--scope", "managed", "--url", gemini.gateway, "--no-check", "--events", "BeforeTool"]
    capsys.readouterr()
    assert hookbus_main(argv) == 0
    assert "warning" not in capsys.readouterr().err
    folder = gemini.project(hookbus=False)  # no project hooks at all
    gemini.run(folder, "make the file", shell(fleet.DENIED), GEMINI_CLI_SYSTEM_SETTINGS_PATH=str(system_settings))
    assert fleet.REASON in gemini.tool_result() and not (folder / "forbidden.txt").exists()


def test_system_settings_gemini_finds_unsafe_are_skipped_as_the_installer_warns(
    gemini: Gemini, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    system = gemini.root / "etc" / "settings.json"  # below /tmp, which everyone may write
    system.parent.mkdir()
    monkeypatch.setenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH", str(system))
    argv = ["install", "gemini", "--scope", "managed", "--url", gemini.gateway, "--no-check", "--events", "BeforeTool"]
    capsys.readouterr()
    assert hookbus_main(argv) == 0
    assert "Gemini CLI skips system settings unless" in capsys.readouterr().err
    folder = gemini.project(hookbus=False)
    gemini.run(folder, "make the file", shell(fleet.DENIED), GEMINI_CLI_SYSTEM_SETTINGS_PATH=str(system))
    assert (folder / "forbidden.txt").exists()  # the hook never ran: Gemini skipped the file


def test_an_untrusted_folder_is_what_the_installer_warns_of(
    gemini: Gemini, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = gemini.root / "untrusted"
    (folder / ".gemini").mkdir(parents=True)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("GEMINI_CLI_HOME", str(gemini.home))
    capsys.readouterr()
    assert hookbus_main(["install", "gemini", "--url", gemini.gateway, "--no-check"]) == 0
    assert f"hookbus: warning: Gemini CLI does not trust {folder}" in capsys.readouterr().err
    refused = gemini.run(folder, "make the file", shell(fleet.ALLOWED), returncode=55)
    assert "trusted" in refused.stderr and gemini.fake.requests == []


def test_the_log_names_the_agent_and_the_canonical_tool(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool")
    command = f"{fleet.DENIED} # logged"
    gemini.run(folder, "make the file", shell(command))

    def denied() -> list[dict[str, Any]]:
        return [
            r for r in fleet.records(gemini.up) if r.get("decision") == "deny" and command in json.dumps(r.get("input"))
        ]

    wait_for(lambda: bool(denied()), timeout_s=30, interval_s=0.1)
    record = denied()[-1]
    assert (record["agent"], record["tool_name"], record["event"]) == ("gemini", "Bash", "PreToolUse")
    assert record["input"]["agent_tool_name"] == "run_shell_command"
    assert record["input"]["agent_event_name"] == "BeforeTool"
