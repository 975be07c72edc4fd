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
import redis.exceptions
from arq import Retry
from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix
from arq.worker import Worker, func

from bus import metrics
from bus.keys import Keyspace
from bus.policy import Policy
from bus.protocol import Request
from bus.reload import PolicyWatcher
from bus.results import HandlerResult, Outcome
from bus.retry import Backoff
from bus.settings import Settings
from workers.context import HookContext, Runner, Services
from workers.queue import JOB_FUNCTION, arq_pool

logger = logging.getLogger("hookbus.worker")

MAX_TRIES = 3
#: Seconds before retry n is n * RETRY_BASE_S (arq has no backoff curve of its own).
RETRY_BASE_S = 2.0
CONTEXT_TTL_S = 3600
#: How long a running job's claim outlives a worker that stopped renewing it, in seconds.
LEASE_S = 15.0
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
    policy: Policy = ctx["current"]["policy"]
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


class LeasedWorker(Worker):
    """arq's worker with a short lease on running jobs, renewed while the worker lives.

    arq marks a running job with an in-progress key that lives for the job's whole timeout
    (plus 10 s), so the jobs of a SIGKILLed worker wait that long before anyone runs them
    again. Here the key lives ``lease_s`` and the heartbeat renews it: a dead worker's jobs
    run again within ``lease_s`` plus a poll (at least once, as arq promises).
    """

    def __init__(self, *args: Any, lease_s: float = LEASE_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lease_s = lease_s
        self.in_progress_timeout_s = lease_s
        self._renewed_at = 0.0

    async def heart_beat(self) -> None:
        await super().heart_beat()
        now = time.monotonic()
        if self.tasks and now - self._renewed_at >= self.lease_s / 3:
            self._renewed_at = now
            async with self.pool.pipeline(transaction=False) as pipe:
                for running in self.tasks:
                    pipe.pexpire(in_progress_key_prefix + running, int(self.lease_s * 1000))
                await pipe.execute()


def build_worker(settings: Settings, policy: Policy | dict[str, Policy], redis_url: str, *,
                 burst: bool = False) -> LeasedWorker:
    """An arq worker that runs async hooks from hookbus's queue.

    ``policy`` may be a dict holding it under ``"policy"``, which a reload updates in place.
    """
    from workers.runners import default_runners

    current = policy if isinstance(policy, dict) else {"policy": policy}
    pool = arq_pool(redis_url)
    return LeasedWorker(
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
        ctx={"current": current, "runners": default_runners(), "keys": settings.keys, "redis": pool,
             "services": Services(settings, pool)},
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
    try:
        await worker.close()
    except (redis.exceptions.RedisError, OSError) as exc:
        logger.info("closing the worker: %s", exc)
        await worker.pool.aclose()


async def serve_worker(settings: Settings, policy: Policy, redis_url: str, metrics_port: int | None = None) -> None:
    """Run the arq worker until SIGINT/SIGTERM; SIGHUP (or an edit) reloads the policy."""
    metrics.init_metrics()
    metrics.start_http_server(metrics_port, settings.metrics_host, settings.metrics_token)
    current = {"policy": policy}
    watcher = PolicyWatcher(settings.policy_paths, lambda new: current.__setitem__("policy", new))
    await watcher.start()
    backoff = Backoff(cap_s=5.0)
    try:
        while True:
            worker = build_worker(settings, current, redis_url)
            try:
                await worker.async_run()
                return
            except asyncio.CancelledError:
                logger.info("worker stopped")  # arq cancels its main task on SIGINT/SIGTERM
                return
            except (redis.exceptions.RedisError, OSError) as exc:
                # Redis restarted, refused a write (maxmemory) or went away: the queue is still
                # there when it is back, so wait and start again rather than exit.
                metrics.child(metrics.REDIS_ERRORS, "worker").inc()
                delay_s = backoff.next_delay_s()
                logger.warning("worker lost redis (%s); starting again in %.1fs", exc, delay_s)
                await asyncio.sleep(delay_s)
            finally:
                await close_worker(worker)
    finally:
        await watcher.stop()


__all__ = ["build_worker", "close_worker", "deliver_later", "run_async_hook", "serve_worker"]
