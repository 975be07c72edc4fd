"""``hookbus policy coverage``: the decision log written by a real gateway and dispatcher, set
against the policy that decided it, through the real CLI."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.decisionlog.audit import Window
from bus.policy.loading import load_policy
from bus.runtime.settings import Tokens
from bus.stream.protocol import LogRecord, now_ms
from hookbus.policytools.coverage import read_coverage
from tests.conftest import BusProbe, async_wait_for, pre_tool_use, run_hookbus

pytestmark = pytest.mark.system

POLICY = """\
hookbus:
  deadlineSeconds: 5.0
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: rule
          reason: "pack"
          deny: ["Bash(rm -rf *)", "Bash(shred *)"]
          ask: ["Bash(git push *)"]
          allow: ["Bash(ls *)"]
        - type: rule
          reason: "secrets"
          deny: ["Bash(ls -la /secret*)"]
    - matcher: Write
      hooks:
        - {type: rule, deny: ["Write(/etc/**)"]}
    - matcher: Edit
      hooks:
        - {type: rule, deny: ["Edit(/etc/**)"]}
"""
TOKENS = Tokens.parse("acme:tok-a,beta:tok-b")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def logged(platform: Callable[..., Any], bus: BusProbe, tmp_path: Path) -> Path:
    """The policy file, and a log of eight events it decided (seven of acme, one of beta)."""
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    events = [
        ("tok-a", pre_tool_use("rm -rf build")),
        ("tok-a", pre_tool_use("git push origin main")),
        ("tok-a", pre_tool_use("ls -la /secret/keys")),
        ("tok-a", pre_tool_use("ls -l")),
        ("tok-a", pre_tool_use("echo hi")),
        ("tok-a", {**pre_tool_use(""), "tool_name": "Write", "tool_input": {"file_path": "/tmp/x", "content": "x"}}),
        ("tok-a", {**pre_tool_use(""), "tool_name": "WebSearch", "tool_input": {"query": "hookbus"}}),
        ("tok-b", pre_tool_use("rm -rf /")),
    ]
    async with platform(POLICY, tokens=TOKENS) as p:
        answers = await asyncio.gather(*(p.post(body, headers=bearer(token)) for token, body in events))
        assert [a.status_code for a in answers] == [200] * len(events)

        async def all_logged() -> bool:
            return len(await bus.log()) == len(events)

        await async_wait_for(all_logged, timeout_s=20)
    return path


def counts(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    out = {h["label"].split(" [")[0]: (h["decided"], h["matched"]) for h in report["handlers"]}
    out.update({r["label"]: (r["decided"], r["matched"]) for r in report["rules"]})
    return out


async def test_each_handler_and_rule_is_counted_decided_or_matched(logged: Path, redis_url: str, bus: BusProbe) -> None:
    # The dispatcher marks who decided: the rm deny is the pack's, not the secrets rule's.
    rm = next(r for r in await bus.log() if "rm -rf build" in r.payload.decode())
    assert [h.get("decided", False) for h in rm.hooks] == [True, False]

    result = run_hookbus(
        "policy", "coverage", "--policy", str(logged), "--redis-url", redis_url, "--tenant", "acme", "--json"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["events"] == 7 and report["tenants"] == ["acme"]
    assert counts(report) == {
        "PreToolUse[Bash] rule pack": (3, 2),  # rm, push, ls -l; it only ran on the secrets ls and the echo
        "PreToolUse[Bash] rule secrets": (1, 4),
        "PreToolUse[Write] rule": (0, 1),
        "PreToolUse[Edit] rule": (0, 0),
        "deny Bash(rm -rf *)": (1, 0),
        "deny Bash(shred *)": (0, 0),
        "ask Bash(git push *)": (1, 0),
        "allow Bash(ls *)": (1, 1),  # ls -la /secret/keys: the pack allowed it, the secrets rule's deny won
        "deny Bash(ls -la /secret*)": (1, 0),
        "deny Write(/etc/**)": (0, 0),
        "deny Edit(/etc/**)": (0, 0),
    }
    never = sorted(c["label"].split(" [")[0] for c in report["never_matched"])
    assert never == ["PreToolUse[Edit] rule", "deny Bash(shred *)", "deny Edit(/etc/**)", "deny Write(/etc/**)"]
    assert report["uncovered_tools"] == [{"tool": "WebSearch", "events": 1}]
    every = run_hookbus("policy", "coverage", "--policy", str(logged), "--redis-url", redis_url, "--json")
    assert json.loads(every.stdout)["events"] == 8


async def test_the_text_names_each_handler_and_rule_by_its_line(logged: Path, redis_url: str) -> None:
    result = run_hookbus("policy", "coverage", "--policy", str(logged), "--redis-url", redis_url, "--since", "1h")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("coverage of revision ") and lines[0].endswith(" by 8 logged events (all tenants)")
    rows = {line.split()[0] + " " + " ".join(line.split()[1:-2]): line.split()[-2:] for line in lines if "  " in line}
    # Where each handler and rule is written, what it is, and how often it decided and matched.
    assert rows[f"{logged}:7 PreToolUse[Bash] rule pack [{rows_id(logged, 0)}]"] == ["4", "2"]
    assert rows[f"{logged}:9 deny Bash(rm -rf *)"] == ["2", "0"]
    assert rows[f"{logged}:11 allow Bash(ls *)"] == ["1", "1"]
    assert "never matched: 4" in lines and "tools no handler covers: 1" in lines and "  WebSearch (1 events)" in lines


def rows_id(path: Path, index: int) -> str:
    return load_policy([path]).entries("PreToolUse")[index].handler_id[:8]


async def test_records_that_do_not_mark_deciders_are_worked_out(redis_url: str, bus: BusProbe, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    policy = load_policy([path])
    pack, secrets = (e.handler_id for e in policy.entries("PreToolUse")[:2])
    at = now_ms()
    for i, (command, decision) in enumerate([("shred x", "deny"), ("ls -l", "allow"), ("ls -la /secret", "deny")]):
        record = LogRecord(
            event_id=f"old-{i}",
            event="PreToolUse",
            tenant="acme",
            session_id="s",
            tool_name="Bash",
            outcome="decided",
            decision=decision,
            output={},
            payload=orjson.dumps(pre_tool_use(command)),
            received_ms=at,
            decided_ms=at,
            hooks=[{"id": pack, "type": "rule", "outcome": "ok"}, {"id": secrets, "type": "rule", "outcome": "ok"}],
        )
        await bus.redis.xadd(bus.keys.decision_log(), record.encode(), id=f"{at}-{i}")  # type: ignore[arg-type]
    report = (await read_coverage(policy, redis_url, bus.keys, Window())).to_json()
    got = counts(report)
    assert got["deny Bash(shred *)"] == (1, 0) and got["allow Bash(ls *)"] == (1, 1)
    assert got["deny Bash(ls -la /secret*)"] == (1, 0)
    assert got["PreToolUse[Bash] rule pack"] == (2, 1) and got["PreToolUse[Bash] rule secrets"] == (1, 2)


async def test_inputs_are_judged_under_the_limits_and_a_report_keeps_its_budget(
    redis_url: str, bus: BusProbe, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    policy = load_policy([path])
    pack, secrets = (e.handler_id for e in policy.entries("PreToolUse")[:2])
    deep: Any = []
    for _ in range(79):
        deep = [deep]
    at = now_ms()
    inputs = [
        ("huge", pre_tool_use("a;" * 495_000 + "a $x"), "deny"),  # a megabyte: too long to judge
        ("deep", {**pre_tool_use("ls -l"), "extra": deep}, "allow"),  # nested 80 deep: not evaluated
        ("small", pre_tool_use("ls -l"), "allow"),
    ]
    for i, (name, hook_input, decision) in enumerate(inputs):
        record = LogRecord(
            event_id=name,
            event="PreToolUse",
            tenant="acme",
            session_id="s",
            tool_name="Bash",
            outcome="decided",
            decision=decision,
            output={},
            payload=orjson.dumps(hook_input),
            received_ms=at,
            decided_ms=at,
            hooks=[{"id": pack, "type": "rule", "outcome": "ok"}, {"id": secrets, "type": "rule", "outcome": "ok"}],
        )
        await bus.redis.xadd(bus.keys.decision_log(), record.encode(), id=f"{at}-{i}")  # type: ignore[arg-type]
    report = (await read_coverage(policy, redis_url, bus.keys, Window())).to_json()
    assert report["events"] == 3 and report["partial"] is False and report["stopped"] is None
    got = counts(report)
    # As live: the command too long to judge meets the deny rules of both handlers, which decided it.
    assert got["deny Bash(rm -rf *)"] == (1, 0) and got["deny Bash(ls -la /secret*)"] == (1, 0)
    assert got["allow Bash(ls *)"] == (1, 0)  # the small one; the deep one is counted by handler only
    assert got["PreToolUse[Bash] rule pack"] == (2, 1) and got["PreToolUse[Bash] rule secrets"] == (1, 2)
    reasons = {e["id"]: e["reason"] for e in report["unjudged"]["examples"]}
    assert report["unjudged"]["events"] == 2
    assert "hookbus.limits.commandBytes" in reasons["huge"] and "hookbus.limits.nestingDepth" in reasons["deep"]
    partial = (await read_coverage(policy, redis_url, bus.keys, Window(), budget_s=0.0)).to_json()
    assert partial["partial"] is True and partial["events"] == 0 and partial["budget_s"] == 0.0
    assert "time budget of 0 s ran out after 0 records" in partial["stopped"]
