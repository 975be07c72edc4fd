"""Session policy on Gemini CLI's real CLI (pinned, ``gemini -p``) against a real ``hookbus up``.

The same policy as :mod:`tests.agents.test_claude_session`, in Claude Code's terms: the dialect
makes ``run_shell_command`` a ``Bash`` call, so a ``cat .env`` sets ``private_data`` and the
``curl`` after it is denied with the fact named; a fresh session's ``curl`` runs; the third
``touch budget*`` is over its budget, the second ``touch asked*`` is asked about (headless,
Gemini CLI does not run it); after three failing tool calls in a row (reads of missing
files: Gemini CLI sends their AfterTool with an ``error``, a PostToolUseFailure) the loop gate
denies the next call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bus.session.effects import BUDGET_HANDLER, LOOP_GATE_HANDLER
from tests.agents import fleet
from tests.agents.fake_gemini import FakeGemini, call
from tests.agents.harness import loopback_netns, serve_http
from tests.agents.test_claude_session import ASK_REASON, CURL, POLICY
from tests.agents.test_gemini import Gemini, shell
from tests.up import running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def gemini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gemini]:
    root = tmp_path_factory.mktemp("gemini-session")
    fake = FakeGemini()
    policy_file = root / "session-policy.json"
    policy_file.write_text(json.dumps(POLICY))
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, policy_file, {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield Gemini(ns, up, fake, model_port, root)


def results(gemini: Gemini) -> list[str]:
    return [json.dumps(response["response"]) for response in gemini.fake.function_responses()]


def test_curl_after_reading_env_is_denied_naming_the_fact_and_runs_in_a_fresh_session(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool", "AfterTool")
    (folder / ".env").write_text("API_KEY=not-a-real-key\n")
    gemini.run(folder, "read the env file, then call the service", shell("cat .env"), shell(CURL))
    first, second = results(gemini)
    assert "API_KEY" in first
    assert "session facts: private_data" in second and "Rule of Two" in second
    assert not (folder / "curled.txt").exists()

    fresh = gemini.project("--events", "BeforeTool", "AfterTool")
    gemini.run(fresh, "call the service", shell(CURL))
    assert (fresh / "curled.txt").exists()


def test_a_budget_denies_the_call_past_its_limit(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool", "AfterTool")
    gemini.run(folder, "make three files", *(shell(f"touch budget{n}.txt") for n in (1, 2, 3)))
    assert (folder / "budget1.txt").exists() and (folder / "budget2.txt").exists()
    assert not (folder / "budget3.txt").exists()
    assert "two budget files per session (budgeted: 2 of 2)" in results(gemini)[-1]


def test_a_budget_asks_at_its_limit(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool", "AfterTool")
    gemini.run(folder, "make two files", *(shell(f"touch asked{n}.txt") for n in (1, 2)))
    assert (folder / "asked1.txt").exists()
    assert not (folder / "asked2.txt").exists()  # Gemini's confirmation cannot be shown with -p: no run
    asked = [r for r in fleet.session_records(gemini.up, folder) if r["decision"] == "ask"]
    assert [(r["hooks"][0]["id"], r["reason"]) for r in asked] == [
        (BUDGET_HANDLER + "asked", f"{ASK_REASON} (asked: 1 of 1)")
    ]


def test_the_loop_gate_stops_a_run_of_failing_tool_calls(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool", "AfterTool")
    reads = [call("read_file", file_path=f"missing-{n}.txt") for n in (1, 2, 3)]
    gemini.run(folder, "keep trying", *reads, shell("touch after-the-gate.txt"))
    *failed, gated = results(gemini)
    assert len(failed) == 3 and all("File not found" in result for result in failed), failed
    assert "loop gate 3" in gated and "Tool execution blocked" in gated
    assert not (folder / "after-the-gate.txt").exists()
    log = fleet.session_records(gemini.up, folder)
    assert [r["event"] for r in log if r["event"] != "PreToolUse"] == ["PostToolUseFailure"] * 3
    (gate,) = (r for r in log if r["decision"] == "deny")
    assert gate["tool_name"] == "Bash" and [hook["id"] for hook in gate["hooks"]] == [LOOP_GATE_HANDLER]
    assert "failed in a row (loop gate 3)" in gate["reason"]


def test_failing_shell_commands_feed_the_loop_gate(gemini: Gemini) -> None:
    folder = gemini.project("--events", "BeforeTool", "AfterTool")
    failing = [shell(f"ls /no/such/dir{n}") for n in (1, 2, 3)]
    gemini.run(folder, "keep trying", *failing, shell("touch after-the-gate.txt"))
    *failed, gated = results(gemini)
    assert len(failed) == 3 and all("Exit Code: 2" in result for result in failed), failed  # the model read 3 failures
    assert "loop gate 3" in gated and "Tool execution blocked" in gated
    assert not (folder / "after-the-gate.txt").exists()
    log = fleet.session_records(gemini.up, folder)
    # Gemini reports a command's exit only as an "Exit Code: N" line of its result: read as a failure.
    assert [r["event"] for r in log if r["event"] != "PreToolUse"] == ["PostToolUseFailure"] * 3
