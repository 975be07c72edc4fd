"""The arq worker that runs async (fire-and-forget) hooks.

:mod:`workers.jobs.enqueue` puts the jobs on the queue. The worker runs the handler with its own
timeout (an ``http`` hook with the Standard Webhooks headers of :mod:`workers.outbound.webhooks`); a
failed try is retried with jittered backoff or given up, as :mod:`workers.jobs.delivery` decides,
and a job given up goes to the dead-letter stream with every try (:mod:`workers.jobs.deadletters`).
As in Claude Code, the decision fields of an async hook have no effect; its
``additionalContext`` and ``systemMessage`` are kept for the session and delivered with the
next blocking decision (the next turn). Jobs are JSON, never pickle.

**Bounded.** Nothing of a job outlives it: when it finishes (succeeded, or given up and
dead-lettered) arq deletes its definition, retry counter and in-progress key, and hookbus its
list of failed tries (:mod:`workers.jobs.deadletters`). Its result is kept only when
``hookbus.async.keepResultSeconds`` > 0 (default 0; for inspection, or to refuse the same job id
that long, see :mod:`workers.jobs.enqueue`), and without the job's arguments (the event), so a kept
result is a few hundred bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import weakref
from typing import Any

import orjson
import redis.asyncio as aioredis
from arq import Retry
from arq.connections import ArqRedis
from arq.worker import Worker, func

from bus.errors import BusUnavailable, RedisCommandError
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import Policy
from bus.policy.registry import PolicyRegistry
from bus.policy.reload import PolicyWatcher
from bus.policy.schema import MAX_TRIES_LIMIT
from bus.redaction.redact import Redactor, redactor_for
from bus.redis.connection import connect, redis_errors
from bus.redis.keys import Keyspace
from bus.runtime import tracing
from bus.runtime.logs import event_fields
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.metrics_server import start_http_server
from bus.runtime.retry import Backoff
from bus.runtime.settings import Settings
from bus.stream.pending_context import CONTEXT_TTL_S, MAX_PENDING_CONTEXT
from bus.stream.protocol import Request, now_ms
from workers.handlers.context import HookContext, Runner
from workers.handlers.runners import SELF_TIMED_TYPES
from workers.jobs.deadletters import (
    Attempt,
    bury,
    earlier_attempts,
    forget_attempts,
    letter_of,
    masked_error,
    record_attempt,
)
from workers.jobs.delivery import GiveUp, Limits, before_try, failed, verdict
from workers.jobs.enqueue import JOB_FUNCTION, arq_pool
from workers.jobs.leased import LeasedWorker
from workers.jobs.tracing import traced_job
from workers.outbound.webhooks import webhook_id
from workers.services import Services

logger = logging.getLogger("hookbus.worker")

#: arq's own cap on tries, above any handler's ``maxTries``: hookbus gives a job up before arq would.
ARQ_MAX_TRIES = MAX_TRIES_LIMIT + 1
#: arq's cap on one run; the handler's own timeout ends it long before.
ARQ_JOB_TIMEOUT_S = 86_400
#: Jobs one worker runs at a time.
MAX_JOBS = 50
#: How often an idle worker looks at the queue, in seconds: a bound on a new job's wait.
POLL_DELAY_S = 0.02
#: The wait before a job whose dead letter Redis refused (down, or full) gives up again.
BURY_AGAIN_S = 2.0
_REDIS_ERRORS = (BusUnavailable, RedisCommandError)


async def deliver_later(redis: aioredis.Redis, keys: Keyspace, request: Request, result: HandlerResult) -> None:
    """Keep an async hook's context for the session's next turn."""
    output = result.output or {}
    context = (output.get("hookSpecificOutput") or {}).get("additionalContext")
    message = output.get("systemMessage")
    if not context and not message:
        return
    session = str(request.hook_input().get("session_id", ""))
    key = keys.pending_context(request.tenant, session)
    item = orjson.dumps({"additionalContext": context, "systemMessage": message, "event": request.event})
    async with redis.pipeline(transaction=False) as pipe:  # one key: one node of a cluster, in order
        pipe.rpush(key, item)
        pipe.ltrim(key, -MAX_PENDING_CONTEXT, -1)
        pipe.expire(key, CONTEXT_TTL_S)
        await pipe.execute()


def _redactor(ctx: dict[str, Any], policy: Policy) -> Redactor:
    """The policy's redactor, built once per policy (each tenant's, each reload's) and dropped with it."""
    cache: weakref.WeakKeyDictionary[Policy, Redactor] | None = ctx.get("redactors")
    if cache is None:  # not setdefault: that would build a dictionary per job to throw away
        cache = ctx["redactors"] = weakref.WeakKeyDictionary()
    found = cache.get(policy)
    if found is None:
        found = cache[policy] = redactor_for(policy.settings.redact)
    return found


async def _run_handler(ctx: dict[str, Any], hook: HookContext) -> HandlerResult:
    runner: Runner | None = ctx["runners"].get(hook.entry.handler.type)
    if runner is None:
        return HandlerResult(
            Outcome.ERROR, reason=f"handler type '{hook.entry.handler.type}' is not available", retryable=False
        )
    if hook.entry.handler.type in SELF_TIMED_TYPES:
        return await runner(hook)
    try:
        async with asyncio.timeout(hook.timeout_s):
            return await runner(hook)
    except TimeoutError:
        return HandlerResult(Outcome.TIMEOUT, reason=f"timed out after {hook.timeout_s}s")


async def run_async_hook(ctx: dict[str, Any], job: dict[str, Any], handler_id: str) -> str:
    """The arq job: one try of one async handler on one event; retried or dead-lettered when it fails."""
    policy: Policy = ctx["current"]["policy"]
    redis: ArqRedis = ctx["redis"]
    keys: Keyspace = ctx["keys"]
    job_id: str = ctx["job_id"]
    job_try: int = ctx["job_try"]
    # An async hook answers nobody: the event's reply channel and deadline do not bound it.
    request = dataclasses.replace(Request.from_job(job), reply_to="", deadline_ms=0)
    registry: PolicyRegistry | None = ctx.get("registry")
    if registry is not None and request.policy:  # a tenant's layer: the versions its gateway chose
        policy = await registry.resolve(request.tenant, request.policy)
    hook_input = request.hook_input()
    redactor = _redactor(ctx, policy)
    entry = policy.entry(handler_id)
    if entry is None:
        attempt = Attempt(job_try, now_ms(), "error", "the handler is no longer in the policy", False)
        return await _give_up(ctx, request, hook_input, redactor, handler_id, "", GiveUp.NO_HANDLER, attempt)
    handler_type = entry.handler.type
    limits = Limits.of(entry.handler, policy.settings.async_)
    age_s = time.time() - ctx["enqueue_time"].timestamp()
    if (early := before_try(job_try, age_s, limits)) is not None:
        error = (
            f"queued {age_s:.0f}s ago, past maxAgeSeconds ({limits.max_age_s:g})"
            if early is GiveUp.TOO_OLD
            else f"try {job_try} of at most {limits.max_tries}: the worker stopped during the earlier ones"
        )
        return await _give_up(
            ctx,
            request,
            hook_input,
            redactor,
            handler_id,
            handler_type,
            early,
            Attempt(job_try, now_ms(), "not_run", error, False),
        )
    timeout_s = entry.handler.timeout or 600.0
    hook = HookContext(
        request,
        hook_input,
        entry,
        policy,
        timeout_s,
        ctx["services"],
        delivery_id=webhook_id(request.event_id, handler_id),
    )
    started = time.perf_counter()
    run = _run_handler(ctx, hook)
    result = await (traced_job(request, handler_id, entry.handler, job_try, run) if tracing.on else run)
    took_s = time.perf_counter() - started
    ctx["metrics"].child(ctx["metrics"].hook_duration, handler_type).observe(took_s)
    ctx["metrics"].child(ctx["metrics"].async_job_duration, handler_type).observe(took_s)
    if not failed(result):
        if job_try > 1:
            with contextlib.suppress(*_REDIS_ERRORS), redis_errors():  # else the list's TTL removes it
                await forget_attempts(redis, keys, job_id)
        await deliver_later(ctx["bus"], keys, request, result)
        ctx["metrics"].async_jobs.labels("succeeded").inc()
        ctx["metrics"].async_attempts.observe(job_try)
        return result.outcome.value
    attempt = Attempt(
        job_try,
        now_ms(),
        result.outcome.value,
        masked_error(redactor, result.reason),
        result.retryable and result.outcome is not Outcome.BLOCK,
        int(took_s * 1000),
    )
    decided = verdict(result, job_try, age_s, limits)
    if decided.delay_s is None:
        assert decided.give_up is not None
        return await _give_up(ctx, request, hook_input, redactor, handler_id, handler_type, decided.give_up, attempt)
    attempt.retry_in_ms = int(decided.delay_s * 1000)
    try:
        with redis_errors():
            await record_attempt(redis, keys, job_id, attempt, limits.max_age_s)
    except _REDIS_ERRORS as exc:  # the retry matters more than its history
        logger.info("async job %s: try %d not recorded (%s); retrying all the same", job_id, job_try, exc)
    ctx["metrics"].async_jobs.labels("retried").inc()
    raise Retry(defer=decided.delay_s)


async def _give_up(
    ctx: dict[str, Any],
    request: Request,
    hook_input: Any,
    redactor: Redactor,
    handler_id: str,
    handler_type: str,
    why: GiveUp,
    last: Attempt,
) -> str:
    """Dead-letter the job with every try it had; its result says ``dead: <error>``.

    When Redis refuses the letter (down, or full) the job is retried instead of lost: its next
    start is past its tries (or its age), so it is given up again without running, unless it
    was refused for a reason a retry repeats and still has tries (then it runs again).
    """
    redis: ArqRedis = ctx["redis"]
    keys: Keyspace = ctx["keys"]
    try:
        with redis_errors():
            attempts = [*await earlier_attempts(redis, keys, ctx["job_id"]), last]
        letter = letter_of(
            request,
            hook_input,
            redactor,
            job_id=ctx["job_id"],
            handler_id=handler_id,
            handler_type=handler_type,
            why=why.value,
            attempts=attempts,
        )
        with redis_errors():
            entry_id = await bury(redis, keys, letter)
    except _REDIS_ERRORS as exc:
        logger.warning(
            "async job %s: dead letter not written (%s); trying again in %gs", ctx["job_id"], exc, BURY_AGAIN_S
        )
        raise Retry(defer=BURY_AGAIN_S) from exc
    ctx["metrics"].async_jobs.labels("dead").inc()
    ctx["metrics"].async_attempts.observe(ctx["job_try"])
    session = hook_input.get("session_id") if isinstance(hook_input, dict) else None
    logger.warning(
        "async hook given up (%s) after %d tries; dead letter %s",
        why.value,
        ctx["job_try"],
        entry_id,
        extra=event_fields(
            request.event_id,
            request.event,
            request.tenant,
            session,
            handler_id,
            handler_type=handler_type,
            reason=last.error,
        ),
    )
    return f"dead: {last.error}"


def slim_result(result: dict[str, Any]) -> bytes:
    """arq's result record as JSON, without the job's arguments (the event): only what tells how it ended.

    A worker serialises nothing but results with its ``job_serializer``; the jobs themselves are
    written by :func:`workers.jobs.enqueue.arq_pool`'s serializer.
    """
    return orjson.dumps({**result, "a": [], "k": {}}, default=str)


def build_worker(
    settings: Settings,
    policy: Policy | dict[str, Policy],
    redis_url: str,
    *,
    burst: bool = False,
    registry: PolicyRegistry | None = None,
    bus: aioredis.Redis | None = None,
    metrics: Metrics | None = None,
) -> LeasedWorker:
    """An arq worker that runs async hooks from the queue at ``redis_url``.

    ``policy`` may be a dict holding it under ``"policy"``, which a reload updates in place.
    ``bus`` is the bus's Redis (context for the next turn, ``once`` markers, the decision log),
    when the queue has a Redis of its own (``HOOKBUS_QUEUE_REDIS_URL``); ``metrics`` counts the jobs
    (the process's by default).
    """
    from workers.handlers.runners import default_runners

    current = policy if isinstance(policy, dict) else {"policy": policy}
    # A connection for every job that may run, and a few for the poll, the claims and the
    # heartbeat: a job that waits for a connection past the pool's timeout fails its finish
    # ("No connection available"), and the worker starts over.
    pool = arq_pool(redis_url, max_connections=MAX_JOBS + 8)
    return LeasedWorker(
        functions=[func(run_async_hook, name=JOB_FUNCTION, max_tries=ARQ_MAX_TRIES)],
        queue_name=settings.keys.arq_queue,
        redis_pool=pool,
        burst=burst,
        keep_result=current["policy"].settings.async_.keep_result_seconds,
        job_timeout=ARQ_JOB_TIMEOUT_S,
        max_jobs=MAX_JOBS,
        poll_delay=POLL_DELAY_S,
        handle_signals=not burst,
        job_serializer=slim_result,
        job_deserializer=orjson.loads,
        ctx={
            "current": current,
            "runners": default_runners(),
            "keys": settings.keys,
            "redis": pool,
            "bus": bus or pool,
            "services": Services(settings, bus or pool),
            "registry": registry,
            "metrics": metrics or process_metrics(),
        },
    )


async def close_worker(worker: Worker) -> None:
    """Close ``worker`` whatever state Redis is in; never raises a Redis error.

    arq's ``close`` gathers the running jobs and re-raises the first that failed (a job whose
    last write met a Redis that is down or full), then deletes its health key: either raised
    out of :func:`serve_worker`'s restart loop and ended the process. The jobs are waited for
    here (their hooks finish; one whose result could not be stored keeps its lease and runs
    again when the lease ends), and what Redis refuses on the way out is only logged.
    """
    running = list(worker.tasks.values())
    if running:
        await asyncio.wait(running)
        for task in running:
            if not task.cancelled() and task.exception() is not None:
                logger.info("async job not settled (it runs again when its lease ends): %s", task.exception())
        worker.tasks.clear()
    services = worker.ctx.get("services") if worker.ctx else None
    if isinstance(services, Services):
        await services.aclose()  # the outbound HTTP client of http hooks
    try:
        with redis_errors():
            await worker.close()
    except _REDIS_ERRORS as exc:
        logger.info("closing the worker: %s", exc)
        await worker.pool.aclose()


def _no_job_lines(record: logging.LogRecord) -> bool:
    """Drop arq's two info lines per job (``  0.01s → job(...)``, ``← ... ●``): hookbus counts jobs in
    metrics and logs each one it gives up; arq's start, stop and errors still show."""
    return not (record.levelno == logging.INFO and isinstance(record.msg, str) and record.msg.startswith("%6.2fs "))


def set_cpu_priority(worker_cpu: str) -> None:
    """Schedule this process's threads (and those it starts later) as ``worker_cpu`` says.

    ``idle`` is Linux's ``SCHED_IDLE``: the process runs whenever a core is free, and the
    kernel preempts it at once for any normal process that wakes, instead of letting it
    finish its time slice; the commands its hooks start inherit it. ``hookbus up`` runs its
    async worker so: a burst of async jobs then never delays the gateway, a dispatcher or
    Redis on a shared machine, and costs no CPU of its own. Under sustained full load the
    jobs wait (``maxQueued`` and ``maxAgeSeconds`` bound them). Where the kernel has no such
    policy, one warning says so and the process runs at normal priority.
    """
    if worker_cpu != "idle":
        return
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]  # no /proc: this thread, which starts the others
    try:
        for tid in threads:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError) as exc:
        logger.warning(
            "HOOKBUS_WORKER_CPU=idle: this system cannot run the worker at idle priority (%s); "
            "running it at normal priority",
            exc,
        )


async def serve_worker(settings: Settings, policy: Policy, redis_url: str, metrics_port: int | None = None) -> None:
    """Run the arq worker until SIGINT/SIGTERM; SIGHUP (or an edit) reloads the policy."""
    set_cpu_priority(settings.worker_cpu)  # first: the threads started below inherit it
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("arq.worker").addFilter(_no_job_lines)
    metrics = process_metrics()
    metrics.init()
    start_http_server(metrics, metrics_port, settings.metrics_host, settings.metrics_token)
    current = {"policy": policy}

    queue_url = settings.queue_url_for(redis_url)  # ConfigError when the bus is a cluster with no queue Redis
    registry_redis = connect(redis_url)  # the bus
    registry = PolicyRegistry(
        policy, registry_redis, settings.keys, metrics=metrics, trusted_keys=settings.policy_trusted_keys
    )

    def set_policy(new: Policy) -> None:
        current["policy"] = new
        registry.set_base(new)

    watcher = PolicyWatcher(settings.policy_paths, set_policy, metrics=metrics)
    await watcher.start()
    await registry.start()
    backoff = Backoff(cap_s=5.0)
    try:
        while True:
            worker = build_worker(settings, current, queue_url, registry=registry, bus=registry_redis, metrics=metrics)
            try:
                with redis_errors():
                    await worker.async_run()
                return
            except asyncio.CancelledError:
                logger.info("worker stopped")  # arq cancels its main task on SIGINT/SIGTERM
                return
            except _REDIS_ERRORS as exc:
                # Redis restarted, refused a write (maxmemory) or went away: the queue is still
                # there when it is back, so wait and start again rather than exit.
                metrics.child(metrics.redis_errors, "worker").inc()
                delay_s = backoff.next_delay_s()
                logger.warning("worker lost redis (%s); starting again in %.1fs", exc, delay_s)
                await asyncio.sleep(delay_s)
            finally:
                await close_worker(worker)
    finally:
        await registry.stop()
        await registry_redis.aclose()
        await watcher.stop()


__all__ = ["build_worker", "close_worker", "deliver_later", "run_async_hook", "serve_worker", "set_cpu_priority"]
