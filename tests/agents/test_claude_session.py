"""Session policy on Claude Code's real CLI (pinned, ``claude -p``) against a real ``hookbus up``.

The policy is examples/rule-of-two.yaml's idea, cut to what a test can drive: reading ``.env``
sets the fact ``private_data``, after which a ``curl`` is denied with the fact named in the
reason the model reads, while the same ``curl`` in a fresh session runs; a budget of two
``touch budget*`` calls denies the third; a budget of one ``touch asked*`` call asks about the
second (headless, it does not run); the loop gate stops the fourth call after three
failing ones in a row. Every scenario asserts on what the model was sent back and on the files
the commands made, so none can pass because hooks never ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.session.effects import BUDGET_HANDLER
from tests.agents import fleet
from tests.agents.fake_anthropic import FakeAnthropic, tool_calls, tool_results
from tests.agents.harness import loopback_netns, serve_http
from tests.agents.test_claude import Claude, bash
from tests.up import running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

#: The reason of the budget whose verdict at its limit is ``ask``.
ASK_REASON = "one asked file per session, then a person decides"
POLICY = {
    "hookbus": {
        "session": {
            "facts": {
                "private_data": {"setBy": [{"event": "PreToolUse", "rules": ["Read(**/.env)", "Bash(cat *.env*)"]}]}
            },
            "counters": {
                "budgeted": {"count": [{"event": "PreToolUse", "rules": ["Bash(touch budget*)"]}]},
                "asked": {"count": [{"event": "PreToolUse", "rules": ["Bash(touch asked*)"]}]},
            },
            "budgets": {
                "budgeted": {"counter": "budgeted", "limit": 2, "reason": "two budget files per session"},
                "asked": {"counter": "asked", "limit": 1, "verdict": "ask", "reason": ASK_REASON},
            },
            "loopGate": 3,
        }
    },
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "when": {"facts": ["private_data"]},
                "hooks": [{"type": "rule", "deny": ["Bash(curl *)"], "reason": "Rule of Two: no outbound calls"}],
            }
        ]
    },
}


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Claude]:
    root = tmp_path_factory.mktemp("claude-session")
    (root / "home").mkdir()
    policy = root / "session-policy.json"
    policy.write_text(json.dumps(POLICY))
    fake = FakeAnthropic()
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, policy, {"HOOKBUS_TOKENS": fleet.TOKENS}) as up,
    ):
        yield Claude(ns, up, fake, model_port, root)


CURL = "curl -s -m 2 http://127.0.0.1:9/ ; touch curled.txt"


def _project(claude: Claude) -> Path:
    return claude.project("--events", "PreToolUse", "PostToolUse", "PostToolUseFailure")


def test_curl_after_reading_env_is_denied_naming_the_fact_and_runs_in_a_fresh_session(claude: Claude) -> None:
    folder = _project(claude)
    (folder / ".env").write_text("API_KEY=not-a-real-key\n")
    claude.fake.reset(tool_calls(("Read", {"file_path": str(folder / ".env")}), ("Bash", bash(CURL))))
    claude.run(folder, "read the env file, then call the service")
    results = tool_results(claude.fake.requests[-1])
    assert "API_KEY" in results["toolu_fake_1"]  # the read ran
    assert "session facts: private_data" in results["toolu_fake_2"] and "Rule of Two" in results["toolu_fake_2"]
    assert not (folder / "curled.txt").exists()

    fresh = _project(claude)
    claude.fake.reset(tool_calls(("Bash", bash(CURL))))
    claude.run(fresh, "call the service")
    assert (fresh / "curled.txt").exists()


def test_a_budget_denies_the_call_past_its_limit(claude: Claude) -> None:
    folder = _project(claude)
    calls = [("Bash", bash(f"touch budget{n}.txt")) for n in (1, 2, 3)]
    claude.fake.reset(tool_calls(*calls))
    claude.run(folder, "make three files")
    assert (folder / "budget1.txt").exists() and (folder / "budget2.txt").exists()
    assert not (folder / "budget3.txt").exists()
    assert "two budget files per session (budgeted: 2 of 2)" in tool_results(claude.fake.requests[-1])["toolu_fake_3"]


def test_the_loop_gate_stops_a_run_of_failing_commands(claude: Claude) -> None:
    folder = _project(claude)
    calls = [("Bash", bash("ls /no/such/dir")) for _ in range(3)] + [("Bash", bash("touch after-the-gate.txt"))]
    claude.fake.reset(tool_calls(*calls))
    claude.run(folder, "keep trying")
    assert "loop gate 3" in tool_results(claude.fake.requests[-1])["toolu_fake_4"]
    assert not (folder / "after-the-gate.txt").exists()


def test_a_budget_asks_at_its_limit(claude: Claude) -> None:
    folder = _project(claude)
    claude.fake.reset(tool_calls(*(("Bash", bash(f"touch asked{n}.txt")) for n in (1, 2))))
    claude.run(folder, "make two files")
    assert (folder / "asked1.txt").exists()
    assert not (folder / "asked2.txt").exists()  # headless, nobody can answer the ask
    assert f"{ASK_REASON} (asked: 1 of 1)" in tool_results(claude.fake.requests[-1])["toolu_fake_2"]
    asked = [r for r in fleet.session_records(claude.up, folder) if r["decision"] == "ask"]
    assert [r["hooks"][0]["id"] for r in asked] == [BUDGET_HANDLER + "asked"]
