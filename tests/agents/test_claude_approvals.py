"""Claude Code's real CLI (pinned, ``claude -p``) and the approval queue, against a real ``hookbus up``.

The policy sends ``touch approve*`` to the queue (``approval: true``); ``hookbus install claude
--approvals`` puts PreToolUse on the fail-closed shim that waits. While Claude Code waits, the test
answers through ``/v1/approvals`` as a person would: approved, the command runs; denied, the model
reads the approver's reason; unanswered, the approval expires and the command does not run. A
headless run (``HOOKBUS_HEADLESS=1``) is deferred: it stops with ``tool_deferred``, and
``claude -p --resume`` runs the command once it is approved. One approval is given in the
console's Approvals tab with Debian's chromium (Playwright), as a person clicks it.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents import fleet
from tests.agents.fake_anthropic import FakeAnthropic, one_tool_call, tool_results
from tests.agents.harness import Completed, loopback_netns, serve_http
from tests.agents.test_claude import Claude, bash
from tests.conftest import wait_for
from tests.hookbus.console_page import console_page
from tests.hookbus.test_console_browser import ARTIFACTS, _chromium
from tests.up import running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]
APPROVER = {"Authorization": "Bearer tok-approver", "X-Hookbus-Approver": "dana"}


def _policy(folder: Path) -> Path:
    policy = fleet.policy()
    policy["hookbus"] = {"approvals": {"enabled": True, "timeoutSeconds": 15, "holdSeconds": 60}}
    group = {"matcher": "Bash", "approval": True, "hooks": [{"type": "rule", "ask": ["Bash(touch approve*)"]}]}
    policy["hooks"]["PreToolUse"].append(group)
    path = folder / "approvals-policy.json"
    path.write_text(json.dumps(policy))
    return path


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Claude]:
    root = tmp_path_factory.mktemp("claude-approvals")
    (root / "home").mkdir()
    fake = FakeAnthropic()
    env = {"HOOKBUS_TOKENS": fleet.TOKENS, "HOOKBUS_APPROVER_TOKENS": "acme:tok-approver"}
    with (
        loopback_netns() as ns,
        serve_http(ns.listen(), fake.handler()) as model_port,
        running_up(root, _policy(root), env) as up,
    ):
        yield Claude(ns, up, fake, model_port, root)


def _pending(claude: Claude) -> list[dict[str, Any]]:
    response = httpx.get(f"{claude.up.url}/v1/approvals", headers=APPROVER, timeout=5)
    return list(response.json()["approvals"])


def _answer(claude: Claude, verb: str, **body: Any) -> dict[str, Any]:
    found: list[dict[str, Any]] = wait_for(lambda: _pending(claude), timeout_s=60, interval_s=0.1)
    [approval] = found
    url = f"{claude.up.url}/v1/approvals/{approval['id']}/{verb}"
    response = httpx.post(url, headers=APPROVER, json=body, timeout=5)
    assert response.status_code == 200, response.text
    return approval


def _while_running(claude: Claude, folder: Path, verb: str | None, **body: Any) -> Completed:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(claude.run, folder, "make the file")
        if verb is not None:
            _answer(claude, verb, **body)
        return running.result(timeout=120)


def test_an_ask_waits_and_the_command_runs_once_a_person_approves(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse", "--approvals", "120")
    claude.fake.reset(one_tool_call("Bash", bash("touch approved.txt")))
    _while_running(claude, folder, "approve")
    assert (folder / "approved.txt").exists()


def test_a_deny_blocks_it_and_the_model_reads_the_approvers_reason(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse", "--approvals", "120")
    claude.fake.reset(one_tool_call("Bash", bash("touch approve-denied.txt")))
    _while_running(claude, folder, "deny", reason="not before the release, says dana")
    assert "not before the release, says dana" in tool_results(claude.fake.requests[-1])["toolu_fake_1"]
    assert not (folder / "approve-denied.txt").exists()


def test_nobody_answering_expires_the_approval_and_the_command_does_not_run(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse", "--approvals", "120")
    claude.fake.reset(one_tool_call("Bash", bash("touch approve-expired.txt")))
    _while_running(claude, folder, None)
    assert "expired" in tool_results(claude.fake.requests[-1])["toolu_fake_1"]
    assert not (folder / "approve-expired.txt").exists()


def test_a_headless_run_is_deferred_and_resumed_once_approved(claude: Claude) -> None:
    folder = claude.project("--events", "PreToolUse", "--approvals", "120")
    claude.fake.reset(one_tool_call("Bash", bash("touch approve-later.txt")))
    first = claude.run(folder, "make the file", extra_env={"HOOKBUS_HEADLESS": "1"})
    result = json.loads(first.stdout)
    assert result.get("stop_reason") == "tool_deferred", first.stdout[-2000:]
    assert not (folder / "approve-later.txt").exists()
    _answer(claude, "approve")
    claude.run(folder, "", extra_env={"HOOKBUS_HEADLESS": "1"}, resume=result["session_id"])
    assert (folder / "approve-later.txt").exists()


def test_a_person_approves_claudes_ask_in_the_console_and_the_command_runs(claude: Claude) -> None:
    _chromium()
    from playwright.sync_api import expect, sync_playwright

    folder = claude.project("--events", "PreToolUse", "--approvals", "120")
    claude.fake.reset(one_tool_call("Bash", bash("touch approve-console.txt")))
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        sync_playwright() as pw,
        console_page(pw, claude.up.url, "tok-approver") as (page, errors),
    ):
        running = pool.submit(claude.run, folder, "make the file")
        page.click("#tab-approvals")
        card = page.locator(".ap-card")
        expect(card).to_have_count(1, timeout=60_000)
        expect(card).to_contain_text("touch approve-console.txt")
        assert not (folder / "approve-console.txt").exists()  # Claude Code waits for the answer
        page.fill("#ap-name", "dana")
        page.dispatch_event("#ap-name", "change")
        page.screenshot(path=str(ARTIFACTS / "console-approvals-claude.png"))
        card.locator(".ap-once").click()
        running.result(timeout=120)
        expect(page.locator(".ap-card")).to_have_count(0, timeout=10_000)
        assert errors == []
    assert (folder / "approve-console.txt").exists()
