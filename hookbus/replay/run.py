"""``hookbus policy replay``: what a candidate policy would have decided on recorded traffic.

The recorded events of a window of the decision log go through the candidate policy in this
process, with the dispatcher's own :class:`workers.engine.evaluation.Engine`, and each decision is
compared with the one the log holds. Nothing leaves the process:

* ``rule`` and ``function`` handlers (and plugins) run as they would in a dispatcher;
* ``command``, ``http``, ``prompt``, ``agent`` and ``mcp_tool`` handlers are *not replayed*:
  they count as no opinion, and the report says how many decisions involve one. With
  ``--run-handlers`` they run, command hooks in a sandbox (:func:`sandbox_env`): a fresh
  temporary working directory (also the input's ``cwd``) and a fixed environment with no
  variable of this process; http, prompt, agent and mcp_tool hooks make their real requests
  (through the SSRF guard);
* ``async`` handlers are skipped (they never decide); ``once`` markers and Stop-guard counts
  go to a scratch keyspace (:meth:`bus.redis.keys.Keyspace.replay_scratch`), deleted at the end;
* a candidate with session policy (``hookbus.session``, ``when:``) replays each session in log
  order with its state kept in this process (:mod:`hookbus.replay.sessions`), judged at the
  recorded times, and the report counts the sessions a session rule would have stopped.

Each input is judged as a live decision judges it (:mod:`hookbus.replay.judging`): under the
candidate's ``hookbus.limits`` and with the dispatcher's split budget, so a command too long to
judge meets the candidate's deny and ask rules, as it would live; such records are also counted
apart (``unjudged``). With ``--budget`` the replay stops reading the window at that many seconds
and says it is partial.

The inputs are the log's, so redacted where the log redacts: an event with masked fields
whose decision changed or that a rule matched is flagged, because the real input may decide
otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis

from bus.decisionlog.audit import RecordFilter, Window, parse_time, read_window
from bus.errors import ConfigError
from bus.hooks.decisions import Decision
from bus.hooks.events import event_spec
from bus.hooks.merge import merge_results
from bus.hooks.plugins import load_plugins
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import Policy, load_policy
from bus.policy.schema import CommandHandler, FunctionHandler, HttpHandler, McpToolHandler, RuleHandler
from bus.redis.connection import connect, redis_errors
from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings, comma_list
from bus.stream.protocol import LogRecord, Request, now_ms
from hookbus.replay.judging import Budget, Logged, judge_logged
from hookbus.replay.report import Replayed, ReplayReport, input_summary, reason_of
from hookbus.replay.sessions import SessionStates
from workers.engine.evaluation import Engine
from workers.handlers.command import run_command
from workers.handlers.context import HookContext, Runner
from workers.handlers.rule import evaluate_rules
from workers.handlers.runners import default_runners
from workers.services import Services

#: Handler types with effects outside the process: not run unless ``--run-handlers``.
SIDE_EFFECT_TYPES = ("command", "http", "prompt", "agent", "mcp_tool")
DEFAULT_LIMIT = 100_000


def sandbox_env(sandbox: str) -> dict[str, str]:
    """The whole environment of a replayed command hook: fixed values, none taken from this process."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": sandbox,
        "TMPDIR": sandbox,
        "LANG": "C.UTF-8",
        "LANGUAGE": "",
        "LC_ALL": "C.UTF-8",
        "LC_CTYPE": "C.UTF-8",
        "TZ": "UTC",
        "USER": "hookbus-replay",
        "LOGNAME": "hookbus-replay",
        "SHELL": "/bin/sh",
        "TERM": "dumb",
    }


async def _not_replayed(ctx: HookContext) -> HandlerResult:
    return HandlerResult(Outcome.OK, output={}, reason="not replayed")


def build_runners(*, run_handlers: bool, sandbox: str, trusted_modules: frozenset[str] | None) -> dict[str, Runner]:
    """The runner table of a replay (see the module docstring)."""
    runners = default_runners()
    if not run_handlers:
        for handler_type in SIDE_EFFECT_TYPES:
            runners[handler_type] = _not_replayed
    else:
        runners["command"] = _sandboxed_command(sandbox)
    if trusted_modules is not None:
        runners["function"] = _trusted_function(runners["function"], trusted_modules)
    return runners


def _sandboxed_command(sandbox: str) -> Runner:
    async def run(ctx: HookContext) -> HandlerResult:
        handler = ctx.entry.handler
        assert isinstance(handler, CommandHandler)
        hook_input = {**ctx.hook_input, "cwd": sandbox}
        return await run_command(
            handler.model_copy(update={"allowed_env_vars": None}),
            ctx.event,
            orjson.dumps(hook_input),
            hook_input,
            event_id=ctx.request.event_id,
            timeout_s=min(ctx.timeout_s, ctx.request.remaining_s()),
            extra_env=sandbox_env(sandbox),
        )

    return run


def _trusted_function(inner: Runner, trusted: frozenset[str]) -> Runner:
    """Run only functions from modules in ``trusted`` (the console's replay: what the live policy imports)."""

    async def run(ctx: HookContext) -> HandlerResult:
        handler = ctx.entry.handler
        assert isinstance(handler, FunctionHandler)
        if handler.function.partition(":")[0] not in trusted:
            return HandlerResult(Outcome.OK, output={}, reason="not replayed: a module the running policy does not use")
        return await inner(ctx)

    return run


def describe(policy: Policy, result: HandlerResult, hook_input: dict[str, Any]) -> str:
    """Which rule or hook a result came from, for people: ``rule Bash(rm -rf *)``, ``command ./check.sh``."""
    entry = policy.entry(result.handler_id)
    if entry is None:  # a plugin callback
        return result.handler_id
    handler, short = entry.handler, result.handler_id[:8]
    if isinstance(handler, RuleHandler):
        found = evaluate_rules(handler, hook_input)
        return f"rule {found[1]} [{short}]" if found else f"rule handler [{short}]"
    if isinstance(handler, FunctionHandler):
        return f"function {handler.function} [{short}]"
    if isinstance(handler, CommandHandler):
        return f"command {handler.command[:60]} [{short}]"
    if isinstance(handler, HttpHandler):
        return f"http {handler.url} [{short}]"
    if isinstance(handler, McpToolHandler):
        return f"mcp_tool {handler.server}/{handler.tool} [{short}]"
    return f"{handler.type} handler [{short}]"


class Replayer:
    """Evaluates recorded events with a candidate policy (one scratch keyspace per replay)."""

    def __init__(self, policy: Policy, redis: aioredis.Redis, keys: Keyspace, runners: dict[str, Runner]) -> None:
        self.policy = policy
        self.scratch = keys.replay_scratch(uuid.uuid4().hex[:12])
        self.redis = redis
        services = Services(Settings(key_prefix=self.scratch.prefix), redis)
        self.services = services
        # Async handlers never decide: left out.
        self.engine = Engine(policy, redis, self.scratch, runners, async_handlers="skip", services=services)
        #: Each session's state under the candidate (``hookbus.session``), replayed in log order.
        self.sessions = SessionStates()

    async def replay(self, log_id: str, record: LogRecord, logged: Logged) -> Replayed:
        """The candidate's decision on one record, whose input is ``logged`` (judged under the candidate's limits)."""
        with logged.judged():  # what names a rule below sees the input as the engine saw it
            return await self._replay(log_id, record, logged.hook_input)

    async def _replay(self, log_id: str, record: LogRecord, hook_input: dict[str, Any]) -> Replayed:
        blocking = event_spec(record.event).blocking
        deadline_ms = now_ms() + int(self.policy.settings.deadline_for(record.event) * 1000) if blocking else 0
        request = Request(
            record.event_id,
            record.event,
            record.tenant,
            record.payload,
            record.received_ms,
            deadline_ms=deadline_ms,
            reply_to="replay" if blocking else "",
            dialect=record.agent,  # handlers limited to agents (``agents``) run as they did
        )
        key = (record.tenant, record.session_id)
        evaluation = await self.engine.evaluate(request, hook_input, None, self.sessions.get(key), record.received_ms)
        if evaluation.session is not None:
            self.sessions.settled(key, evaluation.session.ops, record.received_ms)
        merged = evaluation.merged
        enforced = [] if self.policy.settings.shadow else [r for r in evaluation.results if not r.shadow]
        deciders = [
            r
            for r in enforced
            if merged.decision != Decision.NONE and merge_results(record.event, [r]).decision == merged.decision
        ]
        responsible = [describe(self.policy, r, hook_input) for r in deciders]
        recorded_reason = reason_of(record.output)
        if not responsible and merged.decision != record.decision:
            responsible = [f"was: {recorded_reason or record.decision}"]
        not_replayed = [
            describe(self.policy, r, hook_input)
            for r in evaluation.results
            if r.reason and r.reason.startswith("not replayed")
        ]
        return Replayed(
            log_id=log_id,
            event_id=record.event_id,
            event=record.event,
            tenant=record.tenant,
            session_id=record.session_id,
            tool_name=record.tool_name,
            received_ms=record.received_ms,
            recorded=record.decision,
            recorded_reason=recorded_reason,
            candidate=merged.decision,
            candidate_reason=merged.reason or reason_of(merged.output),
            responsible=responsible,
            not_replayed=not_replayed,
            masked=_masked(record),
            summary=input_summary(hook_input),
            facts=evaluation.session.facts if evaluation.session is not None else [],
        )

    async def close(self) -> None:
        """Delete the scratch keyspace and close the runners' clients."""
        with contextlib.suppress(Exception), redis_errors():
            batch: list[bytes] = []
            async for key in self.redis.scan_iter(match=self.scratch.all_keys_pattern, count=500):
                batch.append(key)
                if len(batch) >= 500:
                    await self.redis.delete(*batch)
                    batch.clear()
            if batch:
                await self.redis.delete(*batch)
        await self.services.aclose()


def _masked(record: LogRecord) -> list[str]:
    """Where redaction masked the record's input (JSON pointers)."""
    return [str(mask.get("pointer", "?")) for mask in record.masked if isinstance(mask, dict)]


async def replay_window(
    policy: Policy,
    redis_url: str,
    keys: Keyspace,
    window: Window | None = None,
    *,
    tenants: Sequence[str] = (),
    limit: int = DEFAULT_LIMIT,
    run_handlers: bool = False,
    trusted_modules: frozenset[str] | None = None,
    budget_s: float | None = None,
) -> ReplayReport:
    """Replay the records of ``window`` (of ``tenants``, if given) through ``policy`` and add up the
    differences, for at most ``budget_s`` seconds (then the report is partial)."""
    window = window or Window()
    report = ReplayReport(
        policy.revision, list(policy.sources), window.since_ms, window.until_ms, sorted(tenants), run_handlers
    )
    report.budget_s = budget_s
    budget = Budget.start(budget_s)
    redis = connect(redis_url, socket_timeout_s=10.0)
    with tempfile.TemporaryDirectory(prefix="hookbus-replay-") as sandbox:
        runners = build_runners(run_handlers=run_handlers, sandbox=sandbox, trusted_modules=trusted_modules)
        replayer = Replayer(policy, redis, keys, runners)
        seen: set[str] = set()
        try:
            with redis_errors(redis_url):
                async for log_id, record in read_window(redis, keys, window, RecordFilter.of(tenants=tenants)):
                    if report.read >= limit:
                        report.truncated = True
                        break
                    if budget.spent():
                        report.stopped = budget.stopped(report.read)
                        break
                    report.read += 1
                    if record.event_id in seen:
                        report.repeated += 1
                        continue
                    seen.add(record.event_id)
                    logged = await judge_logged(record, policy.settings)
                    if logged is not None and logged.unjudged is not None:
                        report.unjudged.add(log_id, record, logged.unjudged)
                    if logged is None or not logged.evaluable:
                        report.skipped += 1
                    else:
                        report.add(await replayer.replay(log_id, record, logged))
        finally:
            await replayer.close()
            await redis.aclose()
    return report


def replay_command(args: argparse.Namespace, settings: Settings, redis_url: str) -> int:
    """``hookbus policy replay``: exit 0 (or 3 with ``--fail-on-change`` when a decision changes)."""
    # A replay is not the platform: its handler runs must not land in the roles' shared metrics.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # function and plugin modules import as under `hookbus up`
    window = Window.parse(args.since, args.until)
    if args.limit is not None and args.limit <= 0:
        raise ConfigError("--limit must be positive")
    if args.budget is not None and not args.budget > 0:
        raise ConfigError("--budget must be a positive number of seconds")
    trusted = frozenset(comma_list(args.trusted_module)) if args.trusted_module is not None else None
    policy = load_policy(args.candidate)
    plugins = policy.settings.plugins
    if trusted is None or all(name.partition(":")[0] in trusted for name in plugins):
        load_plugins(plugins)
    tenants = comma_list(args.tenant)
    started = time.monotonic()
    report = asyncio.run(
        replay_window(
            policy,
            redis_url,
            settings.keys,
            window,
            tenants=tenants,
            limit=args.limit or DEFAULT_LIMIT,
            run_handlers=args.run_handlers,
            trusted_modules=trusted,
            budget_s=args.budget,
        )
    )
    if args.json:
        body = report.to_json()
        body["elapsed_s"] = round(time.monotonic() - started, 3)
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
    else:
        print(report.to_text())
    return 3 if args.fail_on_change and report.changed else 0


__all__ = [
    "SIDE_EFFECT_TYPES",
    "Replayer",
    "build_runners",
    "describe",
    "parse_time",
    "replay_command",
    "replay_window",
    "sandbox_env",
]
