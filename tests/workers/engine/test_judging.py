"""Judging a command ahead: the subcommand limit, and the fair threads' refusals as "cannot be judged"."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bus.policy.loading import load_policy
from bus.policy.schema import RuleHandler
from bus.rules.limits import DEFAULT_LIMITS, Limits
from tests.conftest import REPO
from tests.hostile.test_decisions import bash, verdicts
from workers.engine import judging
from workers.engine.evaluation import selected
from workers.engine.fairthreads import FairThreads
from workers.engine.judging import judge_command, judged
from workers.handlers.rule import evaluate_rules

pytestmark = pytest.mark.timeout(60)

POLICY = load_policy([REPO / "examples" / "policy.yaml"])


@pytest.mark.parametrize("unit", ["a;", "a | ", "$(a) ", "a\n"])
async def test_a_command_of_more_subcommands_than_the_limit_cannot_be_judged(unit: str) -> None:
    limits = Limits(subcommands=100)
    over = unit * 101 + "ls"
    found = await judge_command(bash(over), limits, 1.5)
    assert found is not None
    (why,) = found.values()
    assert isinstance(why, str) and "over the limit of 100 (hookbus.limits.subcommands)" in why
    assert "deny" in await verdicts(bash(over), limits=limits)
    assert await judge_command(bash(unit * 40 + "ls"), limits, 1.5) is None


async def test_a_long_command_of_too_many_subcommands_cannot_be_judged_after_its_split() -> None:
    command = "a;" * 3000 + "ls"  # over the inline size: split in a thread, then counted
    found = await judge_command(bash(command), DEFAULT_LIMITS, 1.5)
    assert found is not None
    (why,) = found.values()
    assert isinstance(why, str) and "3001 simple commands, over the limit of 1024" in why


async def test_a_tenant_past_its_queue_gets_cannot_be_judged_and_another_tenant_is_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads = FairThreads(1, 1, "test-judge")
    monkeypatch.setattr(judging, "_threads", threads)
    gate, started = threading.Event(), threading.Event()

    def held(remaining_s: float) -> None:
        started.set()
        assert gate.wait(10)

    blocker = asyncio.create_task(threads.run("mallory", 10.0, held))
    assert await asyncio.to_thread(started.wait, 10)
    queued = asyncio.create_task(judge_command(bash("`a` " * 1000 + "ls"), DEFAULT_LIMITS, 1.5, "mallory"))
    await asyncio.sleep(0)  # its call queues
    refused = await judge_command(bash("`b` " * 1000 + "ls"), DEFAULT_LIMITS, 1.5, "mallory")
    assert refused is not None
    (why,) = refused.values()
    assert isinstance(why, str) and "already waiting" in why
    gate.set()
    await blocker
    assert "deny" not in await verdicts(bash("echo " + "x" * 8192), tenant="alice")
    assert isinstance(next(iter((await queued or {}).values())), tuple)


async def test_a_long_command_is_read_in_the_thread_that_split_it_not_on_the_event_loop() -> None:
    from bus.rules import shellread

    command = "bash -c '" + "a $x; " * 3000 + "rm -rf /'"  # its script is parsed while reading it
    found = await judge_command(bash(command), DEFAULT_LIMITS, 1.5, "t")
    assert found is not None and isinstance(next(iter(found.values())), tuple)
    misses = shellread._long_kept.cache_info().misses
    with judged(found, DEFAULT_LIMITS):
        verdicts_seen = [
            verdict[0]
            for entry in POLICY.entries("PreToolUse")
            if isinstance(entry.handler, RuleHandler) and selected(entry, "PreToolUse", bash(command))
            if (verdict := evaluate_rules(entry.handler, bash(command))) is not None
        ]
    assert "deny" in verdicts_seen
    assert shellread._long_kept.cache_info().misses == misses  # matching found the reading done
