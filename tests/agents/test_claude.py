"""Claude Code's real CLI (pinned, headless ``claude -p``) obeys hookbus, in a loopback-only namespace.

Claude Code runs against the scripted fake Anthropic Messages API on a socket inside the
namespace, with the hooks ``hookbus install claude`` writes, pointed at a real ``hookbus up``
outside (relayed in). Every scenario asserts on what the model was sent back or on the files
the shell command made, so none can pass because hooks never ran. Claude Code refuses
``--dangerously-skip-permissions`` as root unless ``IS_SANDBOX=1``.
"""

from __future__ import annotations

import json
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
MODEL = "claude-fake-1"


class Claude:
    """One namespace, one fake model and one ``hookbus up`` for the module's scenarios."""

    def __init__(self, ns: LoopbackNetns, up: UpProcess, fake: FakeAnthropic, model_port: int, root: Path) -> None:
        self.ns, self.up, self.fake, self.root = ns, up, fake, root
        self.gateway = f"http://127.0.0.1:{ns.forward(up.port)}"
        self.model_url = f"http://127.0.0.1:{model_port}"
        self.cli = pinned("claude") / "node_modules" / ".bin" / "claude"
        self.runs = 0

    def project(self, *install: str, settings: dict[str, Any] | None = None) -> Path:
        """A new project folder with hookbus installed by ``hookbus install claude ARGS``."""
        self.runs += 1
        folder = self.root / f"project-{self.runs}"
        (folder / ".claude").mkdir(parents=True)
        settings_file = folder / ".claude" / "settings.json"
        if settings is not None:
            settings_file.write_text(json.dumps(settings))
        if install:
            code = hookbus_main(
                [
                    "install",
                    "claude",
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

    def run(
        self,
        folder: Path,
        prompt: str,
        *,
        token: str = fleet.TOKEN,
        extra_env: dict[str, str] | None = None,
        resume: str | None = None,
    ) -> Completed:
        """``claude -p PROMPT`` in ``folder`` (``--resume SESSION`` with ``resume``)."""
        env = base_env(
            self.root / "home",
            ANTHROPIC_BASE_URL=self.model_url,
            ANTHROPIC_API_KEY="sk-fake",
            HOOKBUS_TOKEN=token,
            IS_SANDBOX="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_TELEMETRY="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            **(extra_env or {}),
        )
        argv = [str(self.cli), "-p", prompt, "--output-format", "json", "--model", MODEL]
        if resume is not None:
            argv += ["--resume", resume]
        result = self.ns.run([*argv, "--dangerously-skip-permissions"], env=env, cwd=folder, timeout_s=120)
        assert result.returncode == 0, result.stderr[-2000:]
        return result


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Claude]:
    root = tmp_path_factory.mktemp("claude")
    (root / "home").mkdir()
    fake = FakeAnthropic()
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, fleet.write_policy(root), {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield Claude(ns, up, fake, model_port, root)


def bash(command: str) -> dict[str, str]:
    return {"command": command, "description": "as the test asks"}


def test_headless_claude_runs_project_hooks_at_all(claude: Claude) -> None:
    local_deny = {"type": "command", "command": "cat >/dev/null; echo 'the local hook says no' >&2; exit 2"}
    folder = claude.project(settings={"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [local_deny]}]}})
    claude.fake.reset(one_tool_call("Bash", bash(fleet.ALLOWED)))
    claude.run(folder, "make the file")
    assert "the local hook says no" in tool_results(claude.fake.requests[-1])["toolu_fake_1"]
    assert not (folder / "allowed.txt").exists()


def test_a_central_deny_stops_the_command_and_the_model_reads_why(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse")
    claude.fake.reset(one_tool_call("Bash", bash(fleet.DENIED)))
    claude.run(folder, "make the file")
    assert fleet.REASON in tool_results(claude.fake.requests[-1])["toolu_fake_1"]
    assert not (folder / "forbidden.txt").exists()


def test_an_allow_lets_the_command_run(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse")
    claude.fake.reset(one_tool_call("Bash", bash(fleet.ALLOWED)))
    claude.run(folder, "make the file")
    assert (folder / "allowed.txt").exists()


def test_a_central_rewrite_runs_the_rewritten_command(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse")
    claude.fake.reset(one_tool_call("Bash", bash(fleet.TO_REWRITE)))
    claude.run(folder, "make the file")
    assert (folder / "rewritten.txt").exists() and not (folder / "rewrite-me.txt").exists()


def test_a_central_stop_block_keeps_the_agent_working(claude: Claude) -> None:
    folder = claude.project("--events", "Stop")
    claude.fake.reset(lambda request: text(f"Finished; {central_hooks.STOP_TRIGGER}"))
    claude.run(folder, "say you are done")
    assert len(claude.fake.requests) >= 2
    assert central_hooks.STOP_REASON in user_text(claude.fake.requests[1])


def test_central_context_reaches_the_model(claude: Claude) -> None:
    folder = claude.project("--events", "UserPromptSubmit")
    claude.fake.reset(lambda request: text("Noted."))
    claude.run(folder, f"hello {central_hooks.CONTEXT_TRIGGER}")
    assert central_hooks.CONTEXT in json.dumps(claude.fake.requests[0])


def test_a_wrong_token_fails_open_and_blocks_when_installed_fail_closed(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse")
    claude.fake.reset(one_tool_call("Bash", bash(fleet.DENIED)))
    claude.run(folder, "make the file", token="wrong")
    assert (folder / "forbidden.txt").exists()  # http hooks fail open on a 401

    closed = claude.project("--events", "PreToolUse", "--shim", "--fail-closed")
    claude.fake.reset(one_tool_call("Bash", bash(fleet.ALLOWED)))
    claude.run(closed, "make the file", token="wrong")
    assert "failing closed" in tool_results(claude.fake.requests[-1])["toolu_fake_1"]
    assert not (closed / "allowed.txt").exists()


def test_the_log_names_the_agent_and_the_canonical_tool(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse")
    claude.fake.reset(one_tool_call("Bash", bash(fleet.DENIED)))
    claude.run(folder, "make the file")

    def denied() -> list[dict[str, Any]]:
        return [
            r
            for r in fleet.records(claude.up)
            if r.get("decision") == "deny" and fleet.DENIED in json.dumps(r.get("input", {}))
        ]

    wait_for(lambda: bool(denied()), timeout_s=30, interval_s=0.1)
    record = denied()[-1]
    assert (record["agent"], record["tool_name"]) == ("claude", "Bash")


def test_an_input_too_large_to_judge_is_denied_not_run(claude: Claude) -> None:
    # Over the gateway's 1 MiB body limit: answered 200 with a block, which Claude Code reads as a
    # deny (a 413 would have let the command run).
    folder = claude.project("--events", "PreToolUse")
    claude.fake.reset(one_tool_call("Bash", bash(fleet.ALLOWED + " # " + "x" * 1_100_000)))
    claude.run(folder, "make the file")
    assert "cannot judge" in tool_results(claude.fake.requests[-1])["toolu_fake_1"]
    assert not (folder / "allowed.txt").exists()
