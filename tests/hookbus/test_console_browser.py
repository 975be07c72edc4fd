"""The console in a real browser: Debian's ``chromium`` driven by Playwright, against a running ``hookbus up``.

The page is loaded from the gateway that ``hookbus up`` starts (its start-up output names the
URL), a token is entered, a deny is sent, and the decision with its reason must show in the
feed within 2 s; a click opens its detail; a filter hides the rest. A screenshot is kept in
``tests/artifacts/console.png`` (with ``HOOKBUS_DOCS_SCREENSHOT=1`` also as docs/console.png).

No browser is downloaded: without /usr/bin/chromium (Debian package ``chromium``) the test is
skipped on a developer's machine and fails under CI (``HOOKBUS_CI=1``), where .ci/run installs it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as redis_sync
import yaml

from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord, now_ms
from tests.ci import missing
from tests.conftest import REPO
from tests.hookbus.console_page import CHROMIUM, console_page
from tests.up import UpProcess, running_up

ARTIFACTS = REPO / "tests" / "artifacts"
POLICY = {
    "hookbus": {
        "deadlineSeconds": 2.0,
        "deadlines": {"UserPromptSubmit": 0.3},
        # Session budgets: each lane shows what is left of each, as the last event that moved it
        # left it (a tool call moves ``calls``, its result ``failures``: a record carries only those).
        "session": {
            "budgets": {
                "calls": {"counter": "tool_calls", "limit": 500},
                "failing": {"counter": "failures", "limit": 5},
            }
        },
    },
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {
                        "type": "rule",
                        "reason": "hookbus dangerous-commands pack",
                        "deny": ["Bash(rm -rf /)", "Bash(git push *--force)"],
                        "ask": ["Bash(git push *)"],
                        "allow": ["Bash(ls *)", "Bash(pytest *)", "Bash(git status)"],
                    }
                ],
            },
            {"matcher": "Read|Edit", "hooks": [{"type": "rule", "allow": ["Read", "Edit"]}]},
        ],
        # A hook slower than the event's deadline: the agent gets no decision (fail-open).
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "sleep 2"}]}],
    },
}
TOKENS = {"HOOKBUS_TOKENS": "acme:tok-acme,globex:tok-globex", "HOOKBUS_ADMIN_TOKENS": "tok-admin"}


def _chromium() -> None:
    if not CHROMIUM.exists():
        missing("no /usr/bin/chromium (apt-get install chromium)")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    with running_up(tmp_path, policy, TOKENS) as platform:
        yield platform


def tool(session: str, name: str, tool_input: dict[str, Any], use: str, post: bool = False) -> dict[str, Any]:
    event = "PostToolUse" if post else "PreToolUse"
    extra = {"tool_response": {"ok": True}} if post else {}
    return {
        "hook_event_name": event,
        "session_id": session,
        "tool_name": name,
        "tool_input": tool_input,
        "tool_use_id": use,
        "cwd": "/srv/app",
        **extra,
    }


def fleet_traffic(up: UpProcess, round_: int) -> None:
    """A few agents at work: reads, edits, tests, an ask, a fail-open; tool calls get their results later."""
    sessions = [("tok-acme", "acme-7f3a9c"), ("tok-acme", "acme-2b81d4"), ("tok-globex", "globex-c4e019")]
    steps: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i, (_, session) in enumerate(sessions):
        steps += [
            (tool(session, "Read", {"file_path": f"src/module_{i}.py"}, f"r{i}-{round_}"), {}),
            (tool(session, "Bash", {"command": "ls -la src"}, f"l{i}-{round_}"), {}),
            (
                tool(
                    session,
                    "Edit",
                    {"file_path": f"src/module_{i}.py", "old_string": "a", "new_string": "b"},
                    f"e{i}-{round_}",
                ),
                {},
            ),
            (tool(session, "Bash", {"command": "pytest -q tests"}, f"t{i}-{round_}"), {}),
        ]
    tokens = dict((s, t) for t, s in sessions)
    pending: list[dict[str, Any]] = []
    for hook_input, _ in steps:
        up.emit(tokens[hook_input["session_id"]], hook_input)
        pending.append(hook_input)
        if len(pending) > 2:  # results arrive while the next calls start: calls take a while
            done = pending.pop(0)
            up.emit(
                tokens[done["session_id"]],
                tool(done["session_id"], done["tool_name"], done["tool_input"], done["tool_use_id"], post=True),
            )
    for done in pending:
        up.emit(
            tokens[done["session_id"]],
            tool(done["session_id"], done["tool_name"], done["tool_input"], done["tool_use_id"], post=True),
        )
    up.emit("tok-acme", tool("acme-2b81d4", "Bash", {"command": "git push origin feature/login"}, f"p{round_}"))
    up.emit(
        "tok-globex",
        {"hook_event_name": "UserPromptSubmit", "session_id": "globex-c4e019", "prompt": "ship it", "cwd": "/srv/app"},
    )


def emit_as(up: UpProcess, dialect: str, hook_input: dict[str, Any]) -> dict[str, Any]:
    """Post one hook input of tenant acme in ``dialect``'s format; its (translated) answer."""
    reply = httpx.post(
        f"{up.url}/v1/hooks",
        params={"dialect": dialect},
        json=hook_input,
        headers={"Authorization": "Bearer tok-acme"},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def flood(up: UpProcess, count: int) -> None:
    """``count`` records written straight into the platform's decision log, in one pipeline."""
    state = json.loads((up.state / "hookbus.json").read_text())
    client = redis_sync.Redis.from_url(state["redis"]["url"])
    try:
        with client.pipeline(transaction=False) as pipe:
            for i in range(count):
                hook_input = {
                    "hook_event_name": "PreToolUse",
                    "session_id": f"flood-{i}",
                    "tool_name": "Bash",
                    "tool_input": {"command": f"echo {i}"},
                }
                record = LogRecord(
                    event_id=f"flood-{i}",
                    event="PreToolUse",
                    tenant="acme",
                    session_id=f"flood-{i}",
                    tool_name="Bash",
                    outcome="decided",
                    decision="allow",
                    output={},
                    payload=orjson.dumps(hook_input),
                    received_ms=now_ms(),
                    decided_ms=now_ms(),
                )
                pipe.xadd(Keyspace().decision_log(), record.encode())  # type: ignore[arg-type]
            pipe.execute()
    finally:
        client.close()


@pytest.mark.timeout(180)
def test_the_console_shows_a_deny_live_opens_its_detail_and_filters(up: UpProcess) -> None:
    _chromium()
    from playwright.sync_api import expect, sync_playwright

    assert f"console (live decisions, policy what-if) on {up.url}/ui" in up.out.read_text()
    fleet_traffic(up, 1)
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        sync_playwright() as pw,
        console_page(pw, up.url, "tok-admin", viewport={"width": 1500, "height": 960}) as (page, errors),
    ):
        # Tokens are configured: the page asked for one (console_page entered it); it keeps it in the tab only.
        expect(page.locator("#status")).to_have_text("live", timeout=10_000)
        expect(page.locator("#scope")).to_have_text("all tenants")
        assert page.evaluate("sessionStorage.getItem('hookbus.token')") == "tok-admin"
        assert page.evaluate("localStorage.length") == 0
        expect(page.locator("#feed li")).to_have_count(26, timeout=10_000)  # the backlog
        fleet_traffic(up, 2)  # and the same again, live
        expect(page.locator("#feed li")).to_have_count(52, timeout=10_000)

        up.emit("tok-acme", tool("acme-7f3a9c", "Bash", {"command": "rm -rf /"}, "d1"))
        deny = page.locator('#feed li[data-verdict="deny"]', has_text="acme-7f3a9c")
        expect(deny).to_be_visible(timeout=2_000)
        expect(deny).to_contain_text("hookbus dangerous-commands pack (rule: Bash(rm -rf /))", timeout=2_000)
        expect(deny.locator(".agent")).to_have_text("claude")  # no dialect: Claude Code
        expect(page.locator("#feed li").first).to_have_attribute("data-verdict", "deny")

        deny.click()
        detail = page.locator("#detail")
        expect(detail).to_contain_text("decided by: rule Bash(rm -rf /)")
        expect(detail).to_contain_text('"command": "rm -rf /"')
        expect(detail.locator("table tr")).to_have_count(2)  # header + the rule handler
        expect(detail).to_contain_text("policy version")
        expect(page.locator(".lane", has_text="acme-7f3a9c").locator(".chip.call")).not_to_have_count(0)
        # Its 8 calls that went ahead (the denied one did not) of the session's 500.
        budgets = page.locator(".lane", has_text="acme-7f3a9c").locator(".budget")
        expect(budgets).to_have_text(["calls: 492 left", "failing: 5 left"])
        expect(detail).not_to_contain_text("budgets left")  # a denied call moves no budget
        page.locator("#feed li", has_text="acme-7f3a9c").filter(has_text="pytest").first.click()
        expect(detail).to_contain_text("PostToolUse")  # the newest: the result of the session's last call
        expect(detail).to_contain_text("budgets leftfailing: 5")
        expect(detail).not_to_contain_text("calls: 49")
        expect(page.locator("#c-dispatchers")).to_have_text("1", timeout=10_000)
        expect(page.locator("#c-failopen")).to_have_text("2", timeout=10_000)
        shot = ARTIFACTS / "console.png"
        page.screenshot(path=str(shot))
        print(f"console screenshot: {shot}")
        if os.environ.get("HOOKBUS_DOCS_SCREENSHOT"):
            page.screenshot(path=str(REPO / "docs" / "console.png"))

        page.select_option("#f-decision", "deny")
        expect(page.locator("#feed li")).to_have_count(1)
        expect(page.locator('#feed li:not([data-verdict="deny"])')).to_have_count(0)
        page.select_option("#f-decision", "")
        page.fill("#f-session", "globex-")
        expect(page.locator("#feed li")).to_have_count(18)
        expect(page.locator('#feed li[data-verdict="fail-open"]')).to_have_count(2)
        expect(page.locator(".lane")).to_have_count(1)
        page.screenshot(path=str(ARTIFACTS / "console-filtered.png"))

        # The what-if: the same policy, with pytest denied too, over what was recorded.
        candidate = json.loads(json.dumps(POLICY))
        candidate["hooks"]["PreToolUse"][0]["hooks"][0]["deny"].append("Bash(pytest *)")
        page.click("#tab-whatif")
        page.fill("#w-policy", yaml.safe_dump(candidate))
        page.fill("#w-since", "1h")
        page.click("#w-run")
        result = page.locator("#w-result")
        expect(result.locator(".summary")).to_contain_text("6 of 53", timeout=60_000)
        expect(result.locator("table").first).to_contain_text("allow → deny")
        expect(result).to_contain_text("rule Bash(pytest *)")
        expect(result).to_contain_text("Not replayed (counted as no opinion): 2 command")
        page.screenshot(path=str(ARTIFACTS / "console-whatif.png"))
        page.click("#tab-live")

        # Other agents: each row names its agent, and the agent filter picks them.
        page.click("#f-clear")
        gemini = {
            "hook_event_name": "BeforeTool",
            "session_id": "gemini-5e1f",
            "cwd": "/srv/app",
            "tool_name": "run_shell_command",
            "tool_input": {"command": "rm -rf /"},
        }
        assert emit_as(up, "gemini", gemini)["decision"] == "deny"  # Gemini's own answer
        emit_as(up, "sdk", {"hook_event_name": "Notification", "session_id": "sdk-1", "message": "m"})
        expect(page.locator("#feed li .agent", has_text="gemini")).to_have_count(1, timeout=5_000)
        page.fill("#f-agent", "Gemini")
        expect(page.locator("#feed li")).to_have_count(1)
        expect(page.locator("#feed li").first).to_contain_text("gemini-5e1f")
        page.locator("#feed li").first.click()
        expect(page.locator("#detail")).to_contain_text("agentgemini")
        expect(page.locator("#detail")).to_contain_text("PreToolUse(Bash)")
        page.fill("#f-agent", "sdk")
        expect(page.locator("#feed li")).to_have_count(1)
        expect(page.locator("#feed li").first).to_contain_text("sdk-1")
        page.fill("#f-agent", "claude")
        expect(page.locator("#feed li .agent:not(:text-is('claude'))")).to_have_count(0)
        expect(page.locator("#feed li")).not_to_have_count(0)

        # A burst bigger than the page keeps: it holds the newest 2000 records and 400 rows.
        page.click("#f-clear")
        flood(up, 2500)
        expect(page.locator("#shown")).to_have_text("400 shown of 2000 kept", timeout=20_000)
        expect(page.locator("#feed li").first).to_contain_text("flood-2499")
        page.locator("#feed li").first.click()
        expect(page.locator("#detail")).to_contain_text("echo 2499")
        assert errors == []
