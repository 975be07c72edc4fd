"""``POST /v1/policy/replay``: a bad time is a one-line ``invalid_time`` before any child runs, and a
child over its memory limit is a clear ``400``, never a traceback, a hang or a ``500``. Replay and
``GET /v1/policy/coverage`` judge a huge logged input as live, within their budget, and the
gateway answers hooks while their child runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bus.runtime.settings import Tokens
from gateway import console as console_module
from tests.conftest import DENY_RM, BusProbe, assert_error, async_wait_for, logged, pre_tool_use

#: One logged input of a megabyte: thousands of subcommands and an expansion, too long to judge.
HUGE_COMMAND = "a;" * 495_000 + "a $x"
TOKENS = Tokens.parse("acme:tok-a,beta:tok-b")
ADMIN = Tokens.parse_admin("tok-admin")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("since", ["0001-01-01", "99999999999999999999", "whenever"])
async def test_a_bad_time_is_one_line(platform: Callable[..., Any], since: str) -> None:
    async with platform(DENY_RM) as p:
        answer = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": "hooks: {}", "since": since})
        body = assert_error(answer, 400, "invalid_time")
    assert "\n" not in body["detail"] and "Traceback" not in body["detail"] and since in body["detail"]


async def test_a_child_over_its_memory_limit_is_a_clear_error(
    platform: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_module, "REPLAY_MEMORY_BYTES", 48 << 20)  # too little to start Python
    async with platform(DENY_RM) as p:
        answer = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": "hooks: {}"}, timeout=60)
        body = assert_error(answer, 400, "replay_too_large")
        assert "\n" not in body["detail"] and "Traceback" not in body["detail"] and "48 MiB" in body["detail"]
        # The gateway goes on: the next replay, within the limit, runs.
        monkeypatch.setattr(console_module, "REPLAY_MEMORY_BYTES", 1 << 30)
        again = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": "hooks: {}"}, timeout=60)
        assert again.status_code == 200, again.text


def console_child(kind: str) -> int | None:
    """The pid of this process's ``hookbus policy KIND`` child (the gateway runs in the test's process)."""
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            with contextlib.suppress(OSError):
                if f"policy\0{kind}\0".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(pid)
    return None


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` frozen (SIGSTOP) inside the block: it cannot finish, whatever the clock says."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["coverage", "replay"])
async def test_a_huge_logged_input_is_judged_as_live_while_hooks_are_answered(
    platform: Callable[..., Any], bus: BusProbe, kind: str
) -> None:
    async with platform(DENY_RM, tokens=TOKENS, admin_tokens=ADMIN, console_budget_s=60.0) as p:
        live = await p.post(pre_tool_use(HUGE_COMMAND, "huge"), headers=bearer("tok-a"))
        assert live.json()["hookSpecificOutput"]["permissionDecision"] == "deny"  # cannot be judged, live
        await logged(bus, live)
        await logged(bus, await p.post(pre_tool_use("rm -rf /tmp/x", "small"), headers=bearer("tok-a")))
        admin = bearer("tok-admin")
        if kind == "coverage":
            url = f"{p.url}/v1/policy/coverage"
            running = asyncio.create_task(p.client.get(url, params={"tenant": "acme"}, headers=admin, timeout=100))
        else:
            body = {"policy": DENY_RM, "tenant": ["acme"]}
            running = asyncio.create_task(
                p.client.post(f"{p.url}/v1/policy/replay", json=body, headers=admin, timeout=100)
            )
        child = await async_wait_for(lambda: console_child(kind), timeout_s=20, interval_s=0.001)
        with stopped(child):
            # The report's child cannot finish while it is stopped: another tenant's hook is answered meanwhile.
            answer = await p.post(pre_tool_use("rm -rf /", "meanwhile"), headers=bearer("tok-b"))
            assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
            assert not running.done()
            # It runs at a lower priority than the gateway, which comes first on a shared host.
            assert os.getpriority(os.PRIO_PROCESS, child) > os.getpriority(os.PRIO_PROCESS, 0)
        report = (await running).json()
    assert report["partial"] is False and report["stopped"] is None and report["budget_s"] == 60.0
    unjudged = report["unjudged"]
    assert unjudged["events"] == 1, report
    (example,) = unjudged["examples"]
    assert example["id"] == live.headers["X-Hookbus-Event-Id"] and example["tool_name"] == "Bash"
    assert "hookbus.limits.commandBytes" in example["reason"]
    if kind == "coverage":
        assert report["events"] == 2
        # As live: the input that cannot be judged meets the deny rule, which decided it.
        assert [(r["rule"], r["decided"]) for r in report["rules"]] == [("Bash(rm -rf *)", 2)]
    else:
        assert report["replayed"] == 2 and report["changed"] == 0
