"""The arq worker that runs async (fire-and-forget) hooks.

:mod:`workers.queue` puts the jobs on the queue. The worker runs the handler with its own
timeout; a failed run is retried with backoff up to ``MAX_TRIES`` and then counted as
``dead``. As in Claude Code, the decision fields of an async hook have no effect; its
``additionalContext`` and ``systemMessage`` are kept for the session and delivered with the
next blocking decision (the next turn). Jobs are JSON, never pickle.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from arq import Retry
from arq.connections import ArqRedis
from arq.worker import Worker, func

from bus import metrics
from bus.keys import Keyspace
from bus.policy import Policy
from bus.protocol import Request
from bus.results import HandlerResult, Outcome
from bus.settings import Settings
from workers.context import HookContext, Runner, Services
from workers.queue import JOB_FUNCTION, arq_pool

logger = logging.getLogger("hookbus.worker")

MAX_TRIES = 3
#: Seconds before retry n is n * RETRY_BASE_S (arq has no backoff curve of its own).
RETRY_BASE_S = 2.0
CONTEXT_TTL_S = 3600
MAX_PENDING_CONTEXT = 50


async def deliver_later(redis: ArqRedis, keys: Keyspace, request: Request, result: HandlerResult) -> None:
    """Keep an async hook's context for the session's next turn."""
    output = result.output or {}
    context = (output.get("hookSpecificOutput") or {}).get("additionalContext")
    message = output.get("systemMessage")
    if not context and not message:
        return
    session = str(orjson.loads(request.payload).get("session_id", ""))
    key = keys.pending_context(request.tenant, session)
    item = orjson.dumps({"additionalContext": context, "systemMessage": message, "event": request.event})
    async with redis.pipeline(transaction=True) as pipe:
        pipe.rpush(key, item)
        pipe.ltrim(key, -MAX_PENDING_CONTEXT, -1)
        pipe.expire(key, CONTEXT_TTL_S)
        await pipe.execute()


async def run_async_hook(ctx: dict[str, Any], job: dict[str, Any], handler_id: str) -> str:
    """The arq job: run one async handler on one event."""
    policy: Policy = ctx["policy"]
    runners: dict[str, Runner] = ctx["runners"]
    request = Request.from_job(job)
    entry = next((e for e in policy.entries(request.event) if e.handler_id == handler_id), None)
    if entry is None:
        metrics.ASYNC_JOBS.labels("failed").inc()
        return "handler no longer in the policy"
    hook_input = orjson.loads(request.payload)
    timeout_s = entry.handler.timeout or 600.0
    hook = HookContext(request, hook_input, entry, policy, timeout_s, ctx["services"])
    runner = runners.get(entry.handler.type)
    started = time.perf_counter()
    if runner is None:
        result = HandlerResult(Outcome.ERROR, reason=f"handler type '{entry.handler.type}' is not available")
    else:
        try:
            async with asyncio.timeout(timeout_s):
                result = await runner(hook)
        except TimeoutError:
            result = HandlerResult(Outcome.TIMEOUT, reason=f"timed out after {timeout_s}s")
    metrics.HOOK_DURATION.labels(entry.handler.type).observe(time.perf_counter() - started)
    if result.failed:
        if ctx["job_try"] < MAX_TRIES:
            metrics.ASYNC_JOBS.labels("retried").inc()
            raise Retry(defer=ctx["job_try"] * RETRY_BASE_S)
        metrics.ASYNC_JOBS.labels("dead").inc()
        logger.warning("async hook %s gave up after %d tries: %s", handler_id, ctx["job_try"], result.reason)
        return f"dead: {result.reason}"
    await deliver_later(ctx["redis"], ctx["keys"], request, result)
    metrics.ASYNC_JOBS.labels("succeeded").inc()
    return result.outcome.value


def build_worker(settings: Settings, policy: Policy, redis_url: str, *, burst: bool = False) -> Worker:
    """An arq Worker that runs async hooks from hookbus's queue."""
    from workers.runners import default_runners

    pool = arq_pool(redis_url)
    return Worker(
        functions=[func(run_async_hook, name=JOB_FUNCTION, max_tries=MAX_TRIES)],
        queue_name=settings.keys.arq_queue,
        redis_pool=pool,
        burst=burst,
        keep_result=60,
        max_jobs=50,
        poll_delay=0.1,
        handle_signals=not burst,
        job_serializer=orjson.dumps,
        job_deserializer=orjson.loads,
        ctx={"policy": policy, "runners": default_runners(), "keys": settings.keys, "redis": pool,
             "services": Services(settings, pool)},
    )


async def serve_worker(settings: Settings, policy: Policy, redis_url: str, metrics_port: int | None = None) -> None:
    """Run the arq worker until SIGINT/SIGTERM."""
    metrics.start_http_server(metrics_port)
    worker = build_worker(settings, policy, redis_url)
    try:
        await worker.async_run()
    except asyncio.CancelledError:
        logger.info("worker stopped")  # arq cancels its main task on SIGINT/SIGTERM
    finally:
        await worker.close()


__all__ = ["build_worker", "deliver_later", "run_async_hook", "serve_worker"]
