"""The console's coverage of the running policy: ``GET /v1/policy/coverage`` on a live gateway,
and the what-if tab's Coverage button in a real browser against ``hookbus up``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
import yaml

from bus.redis.keys import Keyspace
from bus.runtime.settings import Tokens
from tests.ci import missing
from tests.conftest import REPO, BusProbe, async_wait_for, pre_tool_use, wait_for
from tests.hookbus.console_page import CHROMIUM, console_page
from tests.up import UpProcess, running_up

pytestmark = pytest.mark.system

POLICY = {
    "hookbus": {"deadlineSeconds": 5.0},
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [{"type": "rule", "reason": "pack", "deny": ["Bash(rm -rf *)", "Bash(shred *)"]}],
            }
        ]
    },
}
TOKENS = Tokens.parse("acme:tok-acme")
ADMIN = Tokens.parse_admin("tok-admin")
ARTIFACTS = REPO / "tests" / "artifacts"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_coverage_of_the_running_policy_for_org_admins(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(yaml.safe_dump(POLICY), tokens=TOKENS, admin_tokens=ADMIN) as p:
        for command in ("rm -rf build", "ls", "rm -rf dist"):
            assert (await p.post(pre_tool_use(command), headers=bearer("tok-acme"))).status_code == 200
        await p.post({**pre_tool_use(""), "tool_name": "WebFetch"}, headers=bearer("tok-acme"))

        async def logged() -> bool:
            return len(await bus.log()) == 4

        await async_wait_for(logged, timeout_s=20)
        url = f"{p.url}/v1/policy/coverage"
        refused = await p.client.get(url, headers=bearer("tok-acme"))
        assert refused.status_code == 403 and "org-admin" in refused.json()["detail"]
        bad = await p.client.get(url, params={"since": "yesterday-ish"}, headers=bearer("tok-admin"))
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_time"
        answer = await p.client.get(url, params={"since": "1h", "tenant": "acme"}, headers=bearer("tok-admin"))
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert report["events"] == 4 and report["tenants"] == ["acme"]
        assert report["sources"] == [str(p.policy.sources[0])]  # the policy's own file, not a temporary copy
        rules = {r["rule"]: (r["decided"], r["matched"]) for r in report["rules"]}
        assert rules == {"Bash(rm -rf *)": (2, 0), "Bash(shred *)": (0, 0)}
        assert [r["where"].rsplit(":", 1)[0] for r in report["rules"]] == [str(p.policy.sources[0])] * 2
        assert report["uncovered_tools"] == [{"tool": "WebFetch", "events": 1}]
        busy = await asyncio.gather(*(p.client.get(url, headers=bearer("tok-admin")) for _ in range(2)))
        assert sorted(r.status_code for r in busy) in ([200, 200], [200, 429])


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    env = {"HOOKBUS_TOKENS": "acme:tok-acme", "HOOKBUS_ADMIN_TOKENS": "tok-admin"}
    with running_up(tmp_path, policy, env) as process:
        yield process


def test_the_what_if_tab_shows_the_coverage_of_the_running_policy(up: UpProcess) -> None:
    if not CHROMIUM.exists():
        missing("the console test needs Debian's chromium (/usr/bin/chromium)")
    from playwright.sync_api import expect, sync_playwright

    for command in ("rm -rf build", "ls -la"):
        up.emit("tok-acme", pre_tool_use(command))
    log = redis_sync.Redis.from_url(up.redis_url())
    try:
        wait_for(lambda: log.xlen(Keyspace().decision_log()) == 2, timeout_s=20)
    finally:
        log.close()
    with sync_playwright() as pw, console_page(pw, up.url, "tok-admin") as (page, errors):
        page.click("#tab-whatif")
        page.fill("#w-since", "1h")
        page.click("#w-coverage")
        result = page.locator("#w-result")
        expect(result.locator(".summary")).to_contain_text("2 logged events", timeout=60_000)
        cells = result.locator("table.rules tr", has_text="deny Bash(rm -rf *)").locator("td")
        expect(cells.nth(2)).to_have_text("1")  # decided
        expect(cells.nth(3)).to_have_text("0")  # matched without deciding
        expect(result.locator(".never")).to_contain_text("deny Bash(shred *)")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console-coverage.png"), full_page=True)
        assert errors == []
