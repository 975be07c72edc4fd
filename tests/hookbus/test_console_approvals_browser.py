"""The console's Approvals view in a real browser (Debian's ``chromium`` driven by Playwright) on ``hookbus up``.

An agent's ``git push`` waits for a person; another tenant's approver sees nothing of it; the
tenant's approver sees it, with its input, and approves it with one click: the agent's held
request gets the allow with the approver's name. Skipped without /usr/bin/chromium on a
developer's machine, failed under CI (``HOOKBUS_CI=1``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_for
from tests.gateway.approvals.helpers import approvals_policy_with_a_fact
from tests.hookbus.console_page import console_page
from tests.hookbus.test_console_browser import ARTIFACTS, _chromium
from tests.up import UpProcess, running_up

TOKENS = {
    "HOOKBUS_TOKENS": "acme:tok-acme,globex:tok-globex",
    "HOOKBUS_APPROVER_TOKENS": "acme:tok-acme-approver,globex:tok-globex-approver",
}


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(approvals_policy_with_a_fact(holdSeconds=60, timeoutSeconds=120))
    with running_up(tmp_path, policy, TOKENS) as platform:
        yield platform


def _hook(up: UpProcess, tool: str, tool_input: dict[str, str], timeout_s: float) -> httpx.Response:
    """The PreToolUse of ``tool`` in session ``acme-9c1d``, sent as the acme agent."""
    hook_input = {
        "hook_event_name": "PreToolUse",
        "session_id": "acme-9c1d",
        "tool_name": tool,
        "tool_input": tool_input,
        "cwd": "/srv/app",
    }
    headers = {"Authorization": "Bearer tok-acme"}
    return httpx.post(f"{up.url}/v1/hooks", json=hook_input, headers=headers, timeout=timeout_s)


def _push(up: UpProcess) -> httpx.Response:
    """A Read of ``.env`` (it sets the session's ``private_data`` fact), then the held ``git push``."""
    assert _hook(up, "Read", {"file_path": "/srv/app/.env"}, 10).status_code == 200
    return _hook(up, "Bash", {"command": "git push origin main"}, 90)


def _pending(up: UpProcess, token: str) -> list[object]:
    response = httpx.get(f"{up.url}/v1/approvals", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    return list(response.json()["approvals"])


@pytest.mark.timeout(180)
def test_an_approver_sees_their_tenants_ask_and_approves_it_in_the_console(up: UpProcess) -> None:
    _chromium()
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        sync_playwright() as pw,
        console_page(pw, up.url, "tok-globex-approver") as (page, errors),
    ):
        held = pool.submit(_push, up)
        page.click("#tab-approvals")
        wait_for(lambda: _pending(up, "tok-acme-approver"), timeout_s=20)
        # Polls made after the ask was pending: the other tenant's approver still sees nothing.
        for _ in range(2):
            with page.expect_response(lambda r: r.url.endswith("/v1/approvals")) as polled:
                pass
            assert polled.value.json() == {"approvals": []}
        expect(page.locator(".ap-card")).to_have_count(0)
        expect(page.locator("#ap-empty")).to_be_visible()
        page.click("#change-token")
        page.fill("#token-input", "tok-acme-approver")
        page.click("#token-ok")
        page.click("#tab-approvals")
        card = page.locator(".ap-card")
        expect(card).to_have_count(1, timeout=10_000)
        expect(card).to_contain_text("git push origin main")
        expect(card).to_contain_text("acme-9c1d")
        expect(card.locator(".ap-facts")).to_have_text("the session's facts: private_data")
        expect(page.locator("#ap-count")).to_have_text("1")
        page.fill("#ap-name", "dana")
        page.dispatch_event("#ap-name", "change")
        page.screenshot(path=str(ARTIFACTS / "console-approvals.png"))
        card.locator(".ap-once").click()
        answer = held.result(timeout=30)
        specific = answer.json()["hookSpecificOutput"]
        assert specific["permissionDecision"] == "allow" and "dana" in specific["permissionDecisionReason"]
        expect(page.locator(".ap-card")).to_have_count(0, timeout=5_000)
        assert errors == []
