"""Session policy on Codex's real CLI (pinned, ``codex exec``) against a real ``hookbus up``.

The same policy as :mod:`tests.agents.test_claude_session`: a ``cat .env`` sets ``private_data``
and the ``curl`` after it is denied with the fact named in what the model gets back; the same
``curl`` in a fresh session runs; the third ``touch budget*`` is over its budget; the second
``touch asked*`` is asked about, which Codex cannot do (the dialect makes it a deny). The loop gate
stops a run of failing commands: Codex's hooks get no exit code, so ``hookbus hook`` reads it from
the session's rollout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.session.effects import BUDGET_HANDLER, LOOP_GATE_HANDLER
from tests.agents import fleet
from tests.agents.fake_responses import FakeResponses, Reply, messages, shell, text
from tests.agents.fake_responses import tool_outputs as outputs_of
from tests.agents.harness import base_env, loopback_netns, serve_http
from tests.agents.test_claude_session import ASK_REASON, CURL, POLICY
from tests.agents.test_codex import TOKEN, codex_binary, codex_config, install
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]
SCENARIOS = {
    "taint": ["cat .env", CURL],
    "fresh": [CURL],
    "budget": ["touch budget1.txt", "touch budget2.txt", "touch budget3.txt"],
    "ask": ["touch asked1.txt", "touch asked2.txt"],
    "loop": ["ls /no/such/dir1", "ls /no/such/dir2", "ls /no/such/dir3", "touch after-the-gate.txt"],
}


def script(request: dict[str, Any]) -> Reply:
    """The scenario's commands one after the other, each once the previous one's output is back."""
    found = re.search(r"SCENARIO=(\w+)", "\n".join(messages(request, "user")))
    commands = SCENARIOS.get(found.group(1) if found else "", [])
    done = len(outputs_of(request))
    return shell(commands[done]) if done < len(commands) else text("done")


class Codex:
    def __init__(self, root: Path, codex: str, home: Path, fake: FakeResponses, ns: Any, up: UpProcess) -> None:
        self.root, self.codex, self.home, self.fake, self.ns, self.up = root, codex, home, fake, ns, up

    def run(self, scenario: str, setup: dict[str, str] | None = None) -> tuple[Path, list[str]]:
        work = self.root / f"work-{scenario}"
        work.mkdir()
        for name, content in (setup or {}).items():
            (work / name).write_text(content)
        env = base_env(self.root / "user", CODEX_HOME=str(self.home), FAKE_KEY="fake", HOOKBUS_TOKEN=TOKEN)
        before = len(self.fake.requests)
        argv = [self.codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        argv += ["--dangerously-bypass-hook-trust", "-C", str(work), f"SCENARIO={scenario}: do the scripted steps"]
        done = self.ns.run(argv, env=env, cwd=work, timeout_s=90)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs = outputs_of(self.fake.requests[-1]) if len(self.fake.requests) > before else []
        return work, outputs


@pytest.fixture(scope="module")
def codex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Codex]:
    binary = codex_binary()
    root = tmp_path_factory.mktemp("codex-session")
    policy = root / "session-policy.json"
    policy.write_text(json.dumps(POLICY))
    fake = FakeResponses(script)
    with loopback_netns() as ns, running_up(root, policy, {"HOOKBUS_TOKENS": f"acme:{TOKEN}"}) as up:
        with serve_http(ns.listen(), fake.handler()) as port:
            home = root / "codex-home"
            home.mkdir()
            (home / "config.toml").write_text(codex_config(port))
            install(ns, home, f"http://127.0.0.1:{ns.forward(up.port)}")
            yield Codex(root, binary, home, fake, ns, up)


def test_curl_after_reading_env_is_denied_naming_the_fact_and_runs_in_a_fresh_session(codex: Codex) -> None:
    work, outputs = codex.run("taint", {".env": "API_KEY=not-a-real-key\n"})
    assert any("API_KEY" in o for o in outputs), outputs
    assert any("session facts: private_data" in o and "Rule of Two" in o for o in outputs), outputs
    assert not (work / "curled.txt").exists()
    fresh, _ = codex.run("fresh")
    assert (fresh / "curled.txt").exists()


def test_a_budget_denies_the_call_past_its_limit(codex: Codex) -> None:
    work, outputs = codex.run("budget")
    assert (work / "budget1.txt").exists() and (work / "budget2.txt").exists()
    assert not (work / "budget3.txt").exists()
    assert any("two budget files per session (budgeted: 2 of 2)" in o for o in outputs), outputs


def test_a_budget_asks_at_its_limit_which_codex_makes_a_deny(codex: Codex) -> None:
    work, outputs = codex.run("ask")
    assert (work / "asked1.txt").exists()
    assert not (work / "asked2.txt").exists()
    assert any(f"{ASK_REASON} (asked: 1 of 1)" in o and "Codex cannot do: denied instead" in o for o in outputs), (
        outputs
    )
    asked = [r for r in fleet.session_records(codex.up, work) if r["decision"] == "ask"]
    assert [r["hooks"][0]["id"] for r in asked] == [BUDGET_HANDLER + "asked"]


def test_the_loop_gate_stops_a_run_of_failing_commands(codex: Codex) -> None:
    work, outputs = codex.run("loop")
    assert sum("Process exited with code 2" in o for o in outputs) == 3, outputs  # the model read 3 failures
    log = fleet.session_records(codex.up, work)
    # Codex reports no failure to its hooks: the shim reads each command's exit code from the rollout.
    failures = [r for r in log if r["event"] == "PostToolUseFailure"]
    assert [r["input"]["error"] for r in failures] == ["Exit code: 2"] * 3, [r["event"] for r in log]
    assert any("loop gate 3" in o for o in outputs), outputs
    assert not (work / "after-the-gate.txt").exists()
    (gate,) = (r for r in log if r["decision"] == "deny")
    assert [hook["id"] for hook in gate["hooks"]] == [LOOP_GATE_HANDLER]
