"""The real Codex CLI (``codex exec``, which has no ``ask``: today an ask is a deny) and the approval queue.

The Codex tests' policy, with its ``git push`` ask sent to the queue (``approval: true``) and
``hookbus install codex --approvals``: Codex waits on its PreToolUse hook while the test answers
through ``/v1/approvals`` as a person would; approved, the command runs.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents.fake_responses import FakeResponses
from tests.agents.harness import loopback_netns, serve_http
from tests.agents.test_codex import Setup, codex_binary, codex_config, install, run_codex, script, write_policy
from tests.conftest import wait_for
from tests.up import running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]
APPROVER = {"Authorization": "Bearer tok-approver", "X-Hookbus-Approver": "erin"}


def _approvals_policy(root: Path) -> Path:
    path = write_policy(root)
    policy = json.loads(path.read_text())
    for group in policy["hooks"]["PreToolUse"]:
        if any("Bash(git push *)" in hook.get("ask", []) for hook in group["hooks"]):
            group["approval"] = True
    policy["hookbus"] = {"approvals": {"enabled": True, "when": "headless", "timeoutSeconds": 60, "holdSeconds": 60}}
    path.write_text(json.dumps(policy))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    codex = codex_binary()
    root = tmp_path_factory.mktemp("codex-approvals")
    env = {"HOOKBUS_TOKENS": "acme:tok-acme", "HOOKBUS_APPROVER_TOKENS": "acme:tok-approver"}
    fake = FakeResponses(script)
    with loopback_netns() as ns, running_up(root, _approvals_policy(root), env) as up:
        with serve_http(ns.listen(), fake.handler()) as port:
            gateway_url = f"http://127.0.0.1:{ns.forward(up.port)}"
            homes = {"open": root / "codex-open"}
            homes["open"].mkdir()
            (homes["open"] / "config.toml").write_text(codex_config(port))
            install(ns, homes["open"], gateway_url, "--approvals", "120")
            yield Setup(ns, up, fake, codex, root, homes, gateway_url)


def _approve_when_pending(setup: Setup) -> dict[str, Any]:
    def pending() -> list[dict[str, Any]]:
        response = httpx.get(f"{setup.up.url}/v1/approvals", headers=APPROVER, timeout=5)
        return list(response.json()["approvals"])

    found: list[dict[str, Any]] = wait_for(pending, timeout_s=60, interval_s=0.1)
    [approval] = found
    answered = httpx.post(f"{setup.up.url}/v1/approvals/{approval['id']}/approve", headers=APPROVER, json={}, timeout=5)
    assert answered.status_code == 200, answered.text
    return approval


def test_codex_waits_for_a_person_and_runs_the_command_once_approved(setup: Setup) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_codex, setup, "ask")
        approval = _approve_when_pending(setup)
        run = running.result(timeout=180)
    assert approval["agent"] == "codex" and "git push origin main" in approval["tool_input"]["command"]
    assert (run.work / "pushed.txt").exists()  # Codex ran it: today this ask would be a deny
