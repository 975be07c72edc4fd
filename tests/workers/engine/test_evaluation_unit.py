"""Unit tests of :class:`workers.engine.evaluation.Engine` with injected runners.

No gateway and no dispatcher: the engine is built directly on a policy from
:func:`bus.policy.loading.policy_from_text`, the suite's real Redis (``once`` claims, the Stop guard,
async context) and runners of our own. The ``command`` runner here does not start a
process: each handler's ``command`` names what it answers (``allow``, ``deny REASON``,
``hang``, ...), so every test reads as its policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from bus.hooks.plugins import clear_hooks
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import Policy, policy_from_text
from bus.policy.schema import CommandHandler
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for, policy_yaml, pre_tool_use
from tests.loopback import LoopbackServer, hang
from workers.engine.evaluation import ONCE_TTL_S, AsyncHandlers, Engine, Evaluation
from workers.handlers import http
from workers.handlers.context import HookContext, Runner
from workers.jobs.enqueue import JOB_FUNCTION
from workers.services import Services

PRE = "PreToolUse"
#: Every evaluation must be over well within this: a hanging handler must not hang a test.
EVALUATION_BOUND_S = 5.0


def allow_output(**fields: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": PRE, "permissionDecision": "allow", **fields}}


class Commands:
    """A ``command`` runner: the handler's ``command`` is ``NAME [ARGUMENT]``, the answer it gives.

    ``ran`` lists ``(command, session_id)`` of every run, in start order; ``cancelled`` the
    commands whose run was cancelled (by a timeout).
    """

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []
        self.cancelled: list[str] = []
        self.gate = asyncio.Event()

    def commands(self) -> list[str]:
        return [command for command, _ in self.ran]

    async def __call__(self, ctx: HookContext) -> HandlerResult:
        handler = ctx.entry.handler
        assert isinstance(handler, CommandHandler)
        self.ran.append((handler.command, str(ctx.hook_input.get("session_id"))))
        name, _, argument = handler.command.partition(" ")
        try:
            return await self._answer(name, argument, ctx)
        except asyncio.CancelledError:
            self.cancelled.append(handler.command)
            raise

    async def _answer(self, name: str, argument: str, ctx: HookContext) -> HandlerResult:
        tool_input = ctx.hook_input.get("tool_input") or {}
        if name == "noop":
            return HandlerResult(Outcome.OK, output={})
        if name in ("allow", "ask", "deny"):
            specific = {"hookEventName": PRE, "permissionDecision": name}
            if argument:
                specific["permissionDecisionReason"] = argument
            return HandlerResult(Outcome.OK, output={"hookSpecificOutput": specific})
        if name == "rewrite":  # allow, with the tool input marked by ARGUMENT
            return HandlerResult(Outcome.OK, output=allow_output(updatedInput={**tool_input, "by": argument}))
        if name == "exit2":
            return HandlerResult(Outcome.BLOCK, reason=argument)
        if name == "error":
            return HandlerResult(Outcome.ERROR, reason=argument or "exit 1")
        if name == "raise":
            raise RuntimeError(argument or "runner exploded")
        if name == "hang":
            await asyncio.Event().wait()
        if name == "gate":  # waits for the test to open the gate
            await self.gate.wait()
            return HandlerResult(Outcome.OK, output={})
        if name == "keep-going":  # blocks a Stop unless the input says let_me_go
            if ctx.hook_input.get("let_me_go"):
                return HandlerResult(Outcome.OK, output={})
            return HandlerResult(Outcome.OK, output={"decision": "block", "reason": "keep going"})
        if name == "context":
            event = ctx.request.event
            return HandlerResult(
                Outcome.OK, output={"hookSpecificOutput": {"hookEventName": event, "additionalContext": argument}}
            )
        raise AssertionError(f"unknown test command {name!r}")


def cmd(command: str, **fields: Any) -> dict[str, Any]:
    return {"type": "command", "command": command, **fields}


def on_bash(*handlers: dict[str, Any], matcher: str = "Bash") -> dict[str, Any]:
    return {PRE: [{"matcher": matcher, "hooks": list(handlers)}]}


def request(hook_input: dict[str, Any], *, deadline_s: float | None = None, tenant: str = "default") -> Request:
    """The request a gateway would append for ``hook_input`` (blocking when it has a deadline)."""
    received = now_ms()
    return Request(
        f"evt-{uuid.uuid4().hex[:8]}",
        hook_input["hook_event_name"],
        tenant,
        orjson.dumps(hook_input),
        received,
        deadline_ms=received + int(deadline_s * 1000) if deadline_s else 0,
        reply_to="gw-test" if deadline_s else "",
    )


@dataclasses.dataclass
class Rig:
    """An engine, its policy, its fake command runner and the metrics it counts into."""

    engine: Engine
    policy: Policy
    commands: Commands
    bus: BusProbe
    metrics: Metrics

    async def evaluate(self, hook_input: dict[str, Any], **request_fields: Any) -> Evaluation:
        async with asyncio.timeout(EVALUATION_BOUND_S):
            return await self.engine.evaluate(request(hook_input, **request_fields), hook_input)

    def handler_id(self, command: str, event: str = PRE) -> str:
        for entry in self.policy.entries(event):
            if isinstance(entry.handler, CommandHandler) and entry.handler.command == command:
                return entry.handler_id
        raise AssertionError(f"no handler {command!r} on {event}")


MakeRig = Callable[..., Rig]


@pytest.fixture(autouse=True)
def _no_plugins() -> Iterator[None]:
    """Plugin callbacks (bus.hooks.plugins, per process) would add results of their own."""
    clear_hooks()
    yield
    clear_hooks()


@pytest.fixture
def m() -> Metrics:
    """The metrics the engine under test counts into (a registry of this test's own)."""
    return Metrics()


@pytest.fixture
def rig(bus: BusProbe, m: Metrics) -> MakeRig:
    """``rig(hooks, runners=..., async_handlers=..., **platform)``: an Engine on the suite's Redis."""

    def make(
        hooks: dict[str, Any],
        *,
        runners: dict[str, Runner] | None = None,
        async_handlers: AsyncHandlers = "inline",
        **platform: Any,
    ) -> Rig:
        policy = policy_from_text(policy_yaml(hooks, **platform))
        commands = Commands()
        table: dict[str, Runner] = {"command": commands, **(runners or {})}
        engine = Engine(policy, bus.redis, bus.keys, table, async_handlers=async_handlers, metrics=m)
        return Rig(engine, policy, commands, bus, m)

    return make


def specific(evaluation: Evaluation) -> dict[str, Any]:
    found: dict[str, Any] = evaluation.merged.output.get("hookSpecificOutput", {})
    return found


# -- selection --------------------------------------------------------------------------------------


async def test_matchers_and_if_select_which_handlers_run(rig: MakeRig) -> None:
    r = rig(
        {
            PRE: [
                {"matcher": "Bash", "hooks": [cmd("noop bash")]},
                {"matcher": "Write|Edit", "hooks": [cmd("noop write")]},
                {"hooks": [cmd("noop every tool")]},
                {"matcher": "Bash", "hooks": [cmd("noop push", **{"if": "Bash(git push *)"})]},
            ],
            "PostToolUse": [{"matcher": "*", "hooks": [cmd("noop post")]}],
        }
    )
    cases = [
        (pre_tool_use("ls"), ["noop bash", "noop every tool"]),
        (pre_tool_use("git push origin main"), ["noop bash", "noop every tool", "noop push"]),
        (pre_tool_use("x", tool="Edit"), ["noop write", "noop every tool"]),
        (pre_tool_use("git push origin main", tool="Read"), ["noop every tool"]),
        ({**pre_tool_use("ls"), "hook_event_name": "PostToolUse"}, ["noop post"]),
    ]
    for hook_input, expected in cases:
        r.commands.ran.clear()
        evaluation = await r.evaluate(hook_input)
        assert sorted(r.commands.commands()) == sorted(expected), hook_input
        # Results come back in policy order, one per handler that ran, each with its id and type.
        assert [res.handler_id for res in evaluation.results] == [
            r.handler_id(c, hook_input["hook_event_name"]) for c in expected
        ]
        assert {res.handler_type for res in evaluation.results} == {"command"}
        assert (evaluation.merged.output, evaluation.merged.decision, evaluation.fail_open) == ({}, "none", None)


async def test_an_event_without_handlers_has_no_opinion(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("deny never asked")))
    evaluation = await r.evaluate({"hook_event_name": "Stop", "session_id": "s-1"})
    assert r.commands.ran == []
    assert (evaluation.results, evaluation.shadow, evaluation.jobs) == ([], [], [])
    assert (evaluation.merged.output, evaluation.merged.decision) == ({}, "none")


async def test_the_runner_is_chosen_by_handler_type(rig: MakeRig) -> None:
    seen: list[str] = []

    async def http_runner(ctx: HookContext) -> HandlerResult:
        seen.append(ctx.entry.handler.type)
        return HandlerResult(Outcome.OK, output={"systemMessage": "from http"})

    r = rig(
        on_bash(
            cmd("noop"),
            {"type": "http", "url": "http://127.0.0.1:9/hook"},
            {"type": "prompt", "prompt": "judge $ARGUMENTS"},
        ),
        runners={"http": http_runner},
    )
    evaluation = await r.evaluate(pre_tool_use("ls"))
    assert r.commands.commands() == ["noop"] and seen == ["http"]
    assert [(res.handler_type, res.outcome) for res in evaluation.results] == [
        ("command", Outcome.OK),
        ("http", Outcome.OK),
        ("prompt", Outcome.ERROR),
    ]
    assert evaluation.results[2].reason == "handler type 'prompt' is not available here"
    assert evaluation.merged.output == {"systemMessage": "from http"}
    assert evaluation.fail_open == "hook_error"  # the prompt handler failed and nothing decided


# -- merging ----------------------------------------------------------------------------------------


async def test_results_are_merged_deny_beats_allow_and_updated_input_is_kept(rig: MakeRig) -> None:
    r = rig(
        on_bash(
            cmd("allow"),
            cmd("rewrite first", **{"if": "Bash(cat *)"}),
            cmd("rewrite last", **{"if": "Bash(cat *)"}),
            cmd("deny no secrets", **{"if": "Bash(cat /etc/*)"}),
            cmd("ask really?", **{"if": "Bash(curl *)"}),
            cmd("exit2 no sudo", **{"if": "Bash(sudo *)"}),
        )
    )
    assert specific(await r.evaluate(pre_tool_use("ls"))) == {"hookEventName": PRE, "permissionDecision": "allow"}

    rewritten = await r.evaluate(pre_tool_use("cat notes.txt"))
    assert rewritten.merged.decision == "allow"
    # The last result in policy order that rewrote the input wins.
    assert specific(rewritten)["updatedInput"] == {"command": "cat notes.txt", "by": "last"}

    denied = await r.evaluate(pre_tool_use("cat /etc/shadow"))
    assert len(denied.results) == 4
    assert denied.merged.decision == "deny"
    assert specific(denied) == {
        "hookEventName": PRE,
        "permissionDecision": "deny",
        "permissionDecisionReason": "no secrets",
    }  # no updatedInput on a deny
    assert denied.merged.reason == "no secrets"

    assert specific(await r.evaluate(pre_tool_use("curl example.com")))["permissionDecision"] == "ask"

    blocked = await r.evaluate(pre_tool_use("sudo reboot"))  # exit 2 votes deny with its reason
    assert [res.outcome for res in blocked.results] == [Outcome.OK, Outcome.BLOCK]
    assert (blocked.merged.decision, specific(blocked)["permissionDecisionReason"]) == ("deny", "no sudo")
    assert blocked.fail_open is None


# -- timeouts and errors ---------------------------------------------------------------------------


async def test_a_handler_past_its_timeout_is_cancelled_and_fails_open(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("allow"), cmd("hang", timeout=0.2)))
    started = time.monotonic()
    evaluation = await r.evaluate(pre_tool_use("ls"))
    assert 0.15 <= time.monotonic() - started < 3.0  # (uvloop timers have 1 ms granularity)
    assert [res.outcome for res in evaluation.results] == [Outcome.OK, Outcome.TIMEOUT]
    assert evaluation.results[1].reason == "timed out after 0.2s"
    assert evaluation.results[1].duration_s >= 0.15
    assert r.commands.cancelled == ["hang"]
    # The allow still stands; the timeout may have let the action through: fail open, counted.
    assert (evaluation.merged.decision, evaluation.fail_open) == ("allow", "hook_timeout")
    assert r.metrics.value("hookbus_hook_errors_total", type="command", outcome="timeout") == 1


async def test_an_http_handler_past_its_timeout_times_out_under_its_own_deadline(
    bus: BusProbe, services: Services, m: Metrics
) -> None:
    # The engine sets no timer of its own for http handlers: run_http's deadline must hold alone.
    async with LoopbackServer(hang) as server:
        hooks = on_bash({"type": "http", "url": server.url(), "timeout": 0.2})
        policy = policy_from_text(policy_yaml(hooks, http={"allowedNetworks": ["127.0.0.0/8"]}))
        engine = Engine(policy, bus.redis, bus.keys, {"http": http.run}, services=services, metrics=m)
        started = time.monotonic()
        async with asyncio.timeout(EVALUATION_BOUND_S):
            evaluation = await engine.evaluate(request(pre_tool_use("ls")), pre_tool_use("ls"))
        assert 0.15 <= time.monotonic() - started < 3.0
        assert len(server.requests) == 1
    assert [res.outcome for res in evaluation.results] == [Outcome.TIMEOUT]
    assert "within 0.2s" in (evaluation.results[0].reason or "")
    assert evaluation.fail_open == "hook_timeout"
    assert m.value("hookbus_hook_errors_total", type="http", outcome="timeout") == 1


async def test_a_failure_under_a_deny_is_not_a_fail_open(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("deny no"), cmd("hang", timeout=0.1), cmd("raise")))
    evaluation = await r.evaluate(pre_tool_use("ls"))
    assert [res.outcome for res in evaluation.results] == [Outcome.OK, Outcome.TIMEOUT, Outcome.ERROR]
    assert (evaluation.merged.decision, evaluation.fail_open) == ("deny", None)


async def test_a_raising_runner_is_a_hook_error_not_a_crash(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("raise kaput"), cmd("rewrite ok")))
    evaluation = await r.evaluate(pre_tool_use("ls"))
    assert (evaluation.results[0].outcome, evaluation.results[0].reason) == (Outcome.ERROR, "RuntimeError: kaput")
    assert specific(evaluation)["updatedInput"] == {"command": "ls", "by": "ok"}
    assert evaluation.fail_open == "hook_error"
    assert r.metrics.value("hookbus_hook_errors_total", type="command", outcome="error") == 1


async def test_the_event_deadline_caps_every_handler_timeout(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("hang")))  # no timeout of its own: a command's default is 600 s
    started = time.monotonic()
    evaluation = await r.evaluate(pre_tool_use("ls"), deadline_s=0.3)
    assert time.monotonic() - started < 3.0
    assert evaluation.results[0].outcome is Outcome.TIMEOUT
    assert evaluation.fail_open == "hook_timeout"


# -- failMode: closed --------------------------------------------------------------------------------


async def test_fail_closed_handlers_deny_on_timeout_and_error(rig: MakeRig) -> None:
    r = rig(
        on_bash(
            cmd("allow"),
            cmd("hang", timeout=0.2, failMode="closed", **{"if": "Bash(slow *)"}),
            cmd("raise broken", failMode="closed", **{"if": "Bash(err *)"}),
        )
    )
    slow = await r.evaluate(pre_tool_use("slow thing"))
    err = await r.evaluate(pre_tool_use("err thing"))
    for evaluation in (slow, err):
        assert evaluation.merged.decision == "deny"  # deny beats the allow
        assert evaluation.fail_open is None
        assert evaluation.results[1].fail_closed is True
    assert specific(slow)["permissionDecisionReason"] == (
        "hookbus: command hook failed (fail-closed): timed out after 0.2s"
    )
    assert specific(err)["permissionDecisionReason"] == (
        "hookbus: command hook failed (fail-closed): RuntimeError: broken"
    )
    assert r.metrics.value("hookbus_fail_closed_total", event=PRE, type="command") == 2


async def test_fail_closed_blocks_a_stop(rig: MakeRig) -> None:
    r = rig({"Stop": [{"hooks": [cmd("error exit 1", failMode="closed")]}]})
    evaluation = await r.evaluate({"hook_event_name": "Stop", "session_id": "s-1"})
    assert evaluation.merged.decision == "block"
    assert evaluation.merged.output == {
        "decision": "block",
        "reason": "hookbus: command hook failed (fail-closed): exit 1",
    }


# -- shadow --------------------------------------------------------------------------------------------


async def test_shadow_handlers_are_reported_not_enforced(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("allow"), cmd("deny would deny", shadow=True), cmd("hang", timeout=0.1, shadow=True)))
    evaluation = await r.evaluate(pre_tool_use("rm -rf build"))
    assert evaluation.merged.output == allow_output()
    assert evaluation.fail_open is None  # a shadow handler's timeout lets nothing through
    assert [res.shadow for res in evaluation.results] == [False, True, True]
    (shadow,) = evaluation.shadow
    assert shadow["decision"] == "deny"
    assert shadow["output"]["hookSpecificOutput"]["permissionDecisionReason"] == "would deny"
    assert shadow["handlers"] == [r.handler_id("deny would deny"), r.handler_id("hang")]
    assert r.metrics.value("hookbus_shadow_decisions_total", event=PRE, decision="deny") == 1


async def test_a_whole_policy_in_shadow_enforces_nothing(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("deny no"), cmd("error boom", failMode="closed")), shadow=True)
    evaluation = await r.evaluate(pre_tool_use("ls"))
    assert len(r.commands.ran) == 2  # they run ...
    assert (evaluation.merged.output, evaluation.merged.decision, evaluation.fail_open) == ({}, "none", None)
    (shadow,) = evaluation.shadow  # ... and what they would have done is reported
    assert shadow["decision"] == "deny"
    assert shadow["output"]["hookSpecificOutput"]["permissionDecisionReason"] == (
        "no\nhookbus: command hook failed (fail-closed): boom"
    )


# -- once ----------------------------------------------------------------------------------------------


async def test_once_handlers_run_once_per_session(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("noop once", once=True), cmd("noop always")))
    for session in ("s-1", "s-1", "s-2", "s-1", "s-2"):
        evaluation = await r.evaluate(pre_tool_use("ls", session))
        assert len(evaluation.results) == 2
    assert [s for c, s in r.commands.ran if c == "noop once"] == ["s-1", "s-2"]
    assert len([c for c, _ in r.commands.ran if c == "noop always"]) == 5
    skipped = (await r.evaluate(pre_tool_use("ls", "s-1"))).results[0]
    assert (skipped.outcome, skipped.reason) == (Outcome.OK, "once: already ran")
    key = r.bus.keys.once("default", "s-1", r.handler_id("noop once"))
    assert await r.bus.redis.get(key) == b"done"
    assert ONCE_TTL_S - 60 < await r.bus.redis.ttl(key) <= ONCE_TTL_S
    # Another tenant's session of the same name is another session.
    await r.evaluate(pre_tool_use("ls", "s-1"), tenant="fleet-b")
    assert [s for c, s in r.commands.ran if c == "noop once"] == ["s-1", "s-2", "s-1"]


async def test_a_once_handler_that_fails_or_blocks_runs_again(rig: MakeRig) -> None:
    r = rig(
        on_bash(
            cmd("error broken", once=True, **{"if": "Bash(err *)"}),
            cmd("exit2 stop", once=True, **{"if": "Bash(block *)"}),
        )
    )
    for command in ("err 1", "err 2", "block 1", "block 2"):
        await r.evaluate(pre_tool_use(command, "s-1"))
    assert r.commands.commands() == ["error broken", "error broken", "exit2 stop", "exit2 stop"]
    for handler in ("error broken", "exit2 stop"):
        assert await r.bus.redis.exists(r.bus.keys.once("default", "s-1", r.handler_id(handler))) == 0


async def test_a_running_once_handler_is_claimed_for_its_run_only(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("gate", once=True, timeout=5)))
    key = r.bus.keys.once("default", "s-1", r.handler_id("gate"))
    first = asyncio.create_task(r.evaluate(pre_tool_use("ls", "s-1")))
    try:
        await async_wait_for(lambda: r.commands.ran, timeout_s=EVALUATION_BOUND_S)  # the first run started
        assert await r.bus.redis.get(key) == b"running"
        assert 0 < await r.bus.redis.ttl(key) <= 5 + 30  # a dispatcher dying now does not block it for days
        concurrent = await r.evaluate(pre_tool_use("ls", "s-1"))
        assert concurrent.results[0].reason == "once: already ran"
        assert len(r.commands.ran) == 1
    finally:
        r.commands.gate.set()
        await first
    assert await r.bus.redis.get(key) == b"done"


# -- the Stop guard ----------------------------------------------------------------------------------


def stop(session: str = "s-1", event: str = "Stop", **extra: Any) -> dict[str, Any]:
    return {"hook_event_name": event, "session_id": session, "stop_hook_active": True, **extra}


BLOCKED = {"decision": "block", "reason": "keep going"}


@pytest.mark.parametrize("event", ["Stop", "SubagentStop"])
async def test_the_stop_guard_lets_the_agent_stop_past_the_limit(rig: MakeRig, event: str) -> None:
    r = rig({event: [{"hooks": [cmd("keep-going")]}]}, stopBlockLimit=2)
    key = r.bus.keys.stop_guard("default", "s-1")
    assert (await r.evaluate(stop(event=event))).merged.output == BLOCKED
    assert (await r.evaluate(stop(event=event))).merged.output == BLOCKED
    assert await r.bus.redis.get(key) == b"2"
    forced = (await r.evaluate(stop(event=event))).merged
    assert (forced.decision, set(forced.output)) == ("none", {"systemMessage"})
    assert forced.output["systemMessage"] == (
        f"hookbus: a hook blocked {event} 3 times in a row; overriding and letting the agent stop "
        "(stopBlockLimit 2). Last reason: keep going"
    )
    assert await r.bus.redis.exists(key) == 0
    assert r.metrics.value("hookbus_stop_guard_overrides_total", event=event) == 1
    # The count starts again after an override; an allowed stop resets it; sessions count apart.
    assert (await r.evaluate(stop(event=event))).merged.output == BLOCKED
    assert (await r.evaluate(stop(event=event, let_me_go=True))).merged.output == {}
    assert await r.bus.redis.exists(key) == 0
    assert (await r.evaluate(stop(event=event))).merged.output == BLOCKED
    assert (await r.evaluate(stop("s-2", event=event))).merged.output == BLOCKED
    assert await r.bus.redis.get(key) == b"1"
    assert r.metrics.value("hookbus_stop_guard_overrides_total", event=event) == 1


async def test_a_stop_block_limit_of_zero_never_overrides(rig: MakeRig) -> None:
    r = rig({"Stop": [{"hooks": [cmd("keep-going")]}]}, stopBlockLimit=0)
    for _ in range(12):
        assert (await r.evaluate(stop())).merged.output == BLOCKED
    assert r.metrics.value("hookbus_stop_guard_overrides_total", event="Stop") == 0


# -- async handlers ---------------------------------------------------------------------------------


async def test_async_handlers_become_jobs_and_do_not_block_the_decision(rig: MakeRig) -> None:
    r = rig(
        on_bash(cmd("hang", **{"async": True, "maxAgeSeconds": 90_000}), cmd("deny not now")),
        async_handlers="jobs",
        **{"async": {"maxQueued": 7}},
    )
    hook_input = pre_tool_use("ls")
    started = time.monotonic()
    evaluation = await r.evaluate(hook_input, deadline_s=3.0)
    assert time.monotonic() - started < 1.0  # the hanging handler was never awaited
    assert r.commands.commands() == ["deny not now"]
    assert [res.handler_id for res in evaluation.results] == [r.handler_id("deny not now")]
    assert evaluation.merged.decision == "deny"
    (job,) = evaluation.jobs  # queued with the settlement: the engine writes nothing
    hang = r.handler_id("hang")
    assert (job.max_queued, job.lifetime_ms) == (7, (90_000 + 3600) * 1000)  # maxAgeSeconds + an hour
    record = orjson.loads(job.record)
    assert (record["f"], record["a"][1], record["t"]) == (JOB_FUNCTION, hang, None)
    queued = Request.from_job(record["a"][0])
    assert job.job_id == f"{queued.event_id}:{hang}"
    assert (orjson.loads(queued.payload), queued.reply_to, queued.deadline_ms) == (hook_input, "", 0)
    assert await r.bus.redis.zcard(r.bus.keys.arq_queue) == 0


async def test_without_a_queue_async_handlers_run_inline(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("noop later", **{"async": True})))  # how the worker's own engine runs them
    evaluation = await r.evaluate(pre_tool_use("ls"))
    assert r.commands.commands() == ["noop later"]
    assert (evaluation.jobs, len(evaluation.results)) == ([], 1)


async def test_a_replay_leaves_async_handlers_out(rig: MakeRig) -> None:
    r = rig(on_bash(cmd("noop later", **{"async": True}), cmd("noop now")), async_handlers="skip")
    evaluation = await r.evaluate(pre_tool_use("ls"))
    assert r.commands.commands() == ["noop now"]
    assert (evaluation.jobs, len(evaluation.results)) == ([], 1)


async def test_context_left_by_async_hooks_is_delivered_on_the_next_turn(rig: MakeRig) -> None:
    r = rig(
        {
            "PostToolUse": [{"hooks": [cmd("noop", **{"async": True})]}],
            "UserPromptSubmit": [{"hooks": [cmd("context live context")]}],
        },
        async_handlers="jobs",
    )
    keys, redis = r.bus.keys, r.bus.redis
    left = [
        orjson.dumps({"additionalContext": "tests failed"}),
        orjson.dumps({"additionalContext": "lint failed", "systemMessage": "2 async hooks reported"}),
    ]
    await redis.rpush(keys.pending_context("default", "s-1"), *left)  # type: ignore[misc]
    await redis.rpush(keys.pending_context("default", "s-2"), b'{"additionalContext": "no"}')  # type: ignore[misc]
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s-1", "prompt": "go on"}
    unanswered = await r.evaluate(prompt)  # not blocking: no answer to carry it, it stays
    assert specific(unanswered)["additionalContext"] == "live context"
    assert await redis.llen(keys.pending_context("default", "s-1")) == 2  # type: ignore[misc]
    first = await r.evaluate(prompt, deadline_s=30)
    assert first.merged.output == {
        "systemMessage": "2 async hooks reported",
        "hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "additionalContext": "live context\n\ntests failed\n\nlint failed",
        },
    }
    assert await redis.exists(keys.pending_context("default", "s-1")) == 0
    second = await r.evaluate(prompt, deadline_s=30)  # delivered once
    assert specific(second)["additionalContext"] == "live context"
    assert await redis.llen(keys.pending_context("default", "s-2")) == 1  # type: ignore[misc]


async def test_context_the_gateway_took_is_delivered_without_a_pop(rig: MakeRig) -> None:
    r = rig(
        {
            "PostToolUse": [{"hooks": [cmd("noop", **{"async": True})]}],
            "UserPromptSubmit": [{"hooks": [cmd("context live context")]}],
        },
        async_handlers="jobs",
    )
    keys, redis = r.bus.keys, r.bus.redis
    await redis.rpush(keys.pending_context("default", "s-1"), b'{"additionalContext": "next time"}')  # type: ignore[misc]
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s-1", "prompt": "go on"}
    taken = request(prompt, deadline_s=30)
    taken.context = b'[{"additionalContext":"taken at append","systemMessage":"from the entry"}]'
    evaluation = await r.engine.evaluate(taken, prompt)
    assert evaluation.merged.output == {
        "systemMessage": "from the entry",
        "hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "additionalContext": "live context\n\ntaken at append",
        },
    }
    taken.context = b"[]"  # the gateway looked and found none: the list is not looked at again
    assert specific(await r.engine.evaluate(taken, prompt))["additionalContext"] == "live context"
    assert await redis.llen(keys.pending_context("default", "s-1")) == 1  # type: ignore[misc]
    taken.context = b'{"not": "a list"}'  # dropped with a warning, the decision stands
    assert specific(await r.engine.evaluate(taken, prompt))["additionalContext"] == "live context"


async def test_context_of_an_expired_event_goes_back_to_the_head_of_the_list(rig: MakeRig) -> None:
    r = rig({"PostToolUse": [{"hooks": [cmd("noop", **{"async": True})]}]}, async_handlers="jobs")
    keys, redis = r.bus.keys, r.bus.redis
    key = keys.pending_context("default", "s-1")
    await redis.rpush(key, b'{"additionalContext":"newer"}')  # type: ignore[misc]
    expired = request({"hook_event_name": "UserPromptSubmit", "session_id": "s-1", "prompt": "go on"}, deadline_s=30)
    expired.context = b'[{"additionalContext":"first"},{"additionalContext":"second"}]'
    await r.engine.restore_context(expired)
    assert [orjson.loads(item) for item in await redis.lrange(key, 0, -1)] == [  # type: ignore[misc]
        {"additionalContext": "first"},
        {"additionalContext": "second"},
        {"additionalContext": "newer"},
    ]
    assert 0 < await redis.ttl(key)
    expired.context = b"[]"
    await r.engine.restore_context(expired)
    assert await redis.llen(key) == 3  # type: ignore[misc]
    await redis.delete(key)
    await redis.set(key, b"not a list")  # refused by Redis: logged, never raised into the dispatcher
    expired.context = b'[{"additionalContext":"first"}]'
    await r.engine.restore_context(expired)
    assert await redis.get(key) == b"not a list"
