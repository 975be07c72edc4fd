"""The sync dispatcher: a consumer-group loop over the event streams.

Each dispatcher reads batches from both streams, evaluates every event concurrently
(bounded), publishes the reply of blocking events to the waiting gateway, appends the
event and its decision to the decision log and acknowledges the entry — all in one
pipelined round trip per burst. Blocking work whose deadline has passed is dropped and
logged as ``expired`` (the gateway already failed open). Entries left pending by a dead
dispatcher are claimed with XAUTOCLAIM; entries delivered too often go to the dead-letter
stream. A live dispatcher keeps its own in-flight entries fresh (XCLAIM JUSTID resets their
idle time) so that a slow hook is never claimed, and run twice, by anyone else. SIGTERM
stops reading (the blocked XREADGROUP is woken with CLIENT UNBLOCK), finishes in-flight
work and leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
import redis.exceptions

from bus import metrics
from bus.connection import connect, redis_errors
from bus.errors import BusUnavailable
from bus.keys import DEAD_LETTER_MAXLEN, DISPATCH_GROUP
from bus.logs import event_fields
from bus.merge import MergedDecision
from bus.plugins import PluginError, load_plugins
from bus.policy import Policy
from bus.policy_registry import PolicyRegistry
from bus.protocol import FailOpenReason, LogRecord, ProtocolError, RecordOutcome, Reply, Request, StreamFields, now_ms
from bus.redact import install_log_redaction, redact_record, redactor_for
from bus.reload import PolicyWatcher
from bus.retry import Backoff
from bus.settings import Settings
from workers.context import Services
from workers.engine import Engine, Evaluation
from workers.outbox import Outbox, Settle
from workers.queue import arq_pool, make_enqueue
from workers.runners import default_runners

logger = logging.getLogger("hookbus.dispatcher")

_HEARTBEAT_S = 2.0
_READ_BLOCK_MS = 1000


class Dispatcher:
    """One dispatcher process (or task): reads, evaluates, replies, logs, acknowledges."""

    def __init__(self, settings: Settings, policy: Policy, redis_url: str, *, consumer: str | None = None) -> None:
        load_plugins(policy.settings.plugins)  # each registers its bus.plugins callbacks; PluginError if one fails
        self.settings = settings
        self.policy = policy
        #: Masks what this dispatcher stores (records, dead letters); handlers see the real input.
        self.redactor = redactor_for(policy.settings.redact)
        install_log_redaction()
        self.redis_url = redis_url
        self.keys = settings.keys
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        # No per-command socket timer (it costs a timer per read); the read loop has its own bound.
        self.redis = connect(redis_url, socket_timeout_s=None)
        # The blocking XREADGROUP has a connection (and a name) of its own, so that a stop can
        # wake it at once with CLIENT UNBLOCK instead of waiting out the block.
        self.reader_name = f"hookbus-reader-{uuid.uuid4().hex[:12]}"
        self.reader = connect(redis_url, socket_timeout_s=None, client_name=self.reader_name)
        self.outbox = Outbox(self.redis, self.keys, redis_url, on_written=self._written,
                             on_refused=self._written)
        self.arq = arq_pool(redis_url)
        self.services = Services(settings, self.redis)
        self.engine = Engine(policy, self.redis, self.keys, default_runners(),
                             enqueue=make_enqueue(self.arq, self.keys), services=self.services)
        self._slots = asyncio.Semaphore(settings.dispatch_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self.streams = (self.keys.blocking_stream, self.keys.events_stream)
        #: Entry ids being handled right now, per stream.
        self.inflight: dict[str, set[bytes]] = {stream: set() for stream in self.streams}
        self.registry = PolicyRegistry(policy, self.redis, self.keys)
        self.watcher = PolicyWatcher(settings.policy_paths, self.set_policy)

    def set_policy(self, policy: Policy) -> None:
        """Swap in a reloaded policy; events in flight finish under the old one."""
        try:
            load_plugins(policy.settings.plugins)
        except PluginError as exc:
            metrics.POLICY_LOAD_FAILURES.inc()
            logger.error("policy reload: %s; keeping the running policy", exc)
            return
        self.policy = policy
        self.redactor = redactor_for(policy.settings.redact)
        self.engine.policy = policy
        self.registry.set_base(policy)

    async def ensure_groups(self) -> None:
        with redis_errors(self.redis_url):
            for stream in self.streams:
                try:
                    await self.redis.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
                except redis.exceptions.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then drain in-flight work."""
        await self.outbox.start()
        await self.registry.start()
        await self.watcher.start()
        helpers = [
            asyncio.create_task(self._heartbeat(stop), name="hookbus-heartbeat"),
            asyncio.create_task(self._janitor(stop), name="hookbus-janitor"),
        ]
        waker = asyncio.create_task(self._wake_reader(stop), name="hookbus-wake-reader")
        logger.info("dispatcher %s serving (policy %s)", self.consumer, self.policy.revision)
        try:
            await self._serve(stop)
        finally:
            waker.cancel()
            await asyncio.gather(waker, return_exceptions=True)
            # The janitor goes on refreshing the in-flight entries while they drain.
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=10)
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self.watcher.stop()
            await self.registry.stop()
            await self.outbox.stop()
            with contextlib.suppress(Exception):
                await self.redis.hdel(self.keys.dispatchers, self.consumer)  # type: ignore[misc]
            await self.reader.aclose()
            await self.redis.aclose()
            await self.arq.aclose()
            await self.services.aclose()
            logger.info("dispatcher %s stopped", self.consumer)

    async def _wake_reader(self, stop: asyncio.Event) -> None:
        """Once stopping, unblock this dispatcher's XREADGROUP (repeatedly: it may not block yet)."""
        await stop.wait()
        while True:
            with contextlib.suppress(Exception):
                for client in await self.redis.client_list():
                    if client.get("name") == self.reader_name:
                        await self.redis.client_unblock(int(client["id"]))
            await asyncio.sleep(0.05)

    async def _serve(self, stop: asyncio.Event) -> None:
        groups_ready = False
        backoff = Backoff(cap_s=1.0)
        while not stop.is_set():
            try:
                if not groups_ready:
                    await self.ensure_groups()
                    groups_ready = True
                with redis_errors(self.redis_url):
                    async with asyncio.timeout(_READ_BLOCK_MS / 1000 + 5):
                        response = await self.reader.xreadgroup(
                            DISPATCH_GROUP, self.consumer, dict.fromkeys(self.streams, ">"),
                            count=self.settings.dispatch_batch, block=_READ_BLOCK_MS,
                        )
                backoff.reset()
            except (BusUnavailable, TimeoutError) as exc:
                if backoff.failures == 0:
                    logger.warning("%s; retrying", exc)
                metrics.child(metrics.REDIS_ERRORS, "read").inc()
                groups_ready = False
                await backoff.wait(stop)
                continue
            except redis.exceptions.ResponseError as exc:
                if "NOGROUP" in str(exc):  # the stream was deleted under us
                    groups_ready = False
                    continue
                raise
            if response:
                metrics.DISPATCH_BATCH.observe(sum(len(entries) for _, entries in response))
            for stream, entries in response or ():
                for entry_id, fields in entries:
                    await self._spawn(stream.decode(), entry_id, fields)

    async def _spawn(self, stream: str, entry_id: bytes, fields: Mapping[bytes, bytes]) -> None:
        await self._slots.acquire()
        self.inflight[stream].add(entry_id)
        task = asyncio.create_task(self.handle(stream, entry_id, fields))
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, stream, entry_id))

    def _done(self, task: asyncio.Task[None], stream: str, entry_id: bytes) -> None:
        # The entry stays in flight (kept fresh, never claimed by others) until the outbox has
        # written its settlement: with Redis refusing writes that may take a while.
        self._tasks.discard(task)
        self._slots.release()
        if task.cancelled() or task.exception() is not None:
            self.inflight[stream].discard(entry_id)
            if not task.cancelled():
                logger.error("dispatch task failed", exc_info=task.exception())

    def _written(self, stream: str, entry_id: bytes) -> None:
        self.inflight[stream].discard(entry_id)

    async def handle(self, stream: str, entry_id: bytes, fields: Mapping[bytes, bytes]) -> None:
        """Evaluate one entry and queue its settlement: record, reply and acknowledgement at once."""
        try:
            request = Request.decode(fields)
        except ProtocolError as exc:
            await self.dead_letter(stream, entry_id, fields, str(exc))
            return
        evaluation: Evaluation | None = None
        hook_input: dict[str, Any] | None = None
        reply: Reply | None = None
        fail_open: FailOpenReason | None = None
        if request.blocking and (request.fail_open or request.expired()):
            # The gateway has answered already (fail open): only the record is left to write.
            metrics.EXPIRED.labels(metrics.event_label(request.event)).inc()
            if not request.fail_open:  # it waited in the stream past its deadline (not spooled in an outage)
                metrics.child(metrics.TIMEOUTS, "queue_wait").inc()
        else:
            try:
                hook_input = orjson.loads(request.payload)
                if not isinstance(hook_input, dict):
                    raise ValueError("hook input is not a JSON object")
                policy = await self.registry.resolve(request.tenant, request.policy)
                evaluation = await self.engine.evaluate(request, hook_input, policy)
            except Exception:  # the agent must get an answer whatever happens here
                logger.exception("evaluating %s %s failed", request.event, request.event_id, extra=event_fields(
                    request.event_id, request.event, request.tenant,
                    hook_input.get("session_id") if isinstance(hook_input, dict) else None))
                fail_open = FailOpenReason.DISPATCHER_ERROR
                reply = Reply(request.event_id, {}, "none", fail_open)
            else:
                fail_open = FailOpenReason(evaluation.fail_open) if evaluation.fail_open else None
                hooks = [(r.handler_type, round(r.duration_s, 6), r.outcome.value) for r in evaluation.results]
                reply = Reply(request.event_id, evaluation.merged.output, evaluation.merged.decision,
                              fail_open, hooks)
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("decided %s", evaluation.merged.decision, extra=event_fields(
                        request.event_id, request.event, request.tenant, hook_input.get("session_id"),
                        ",".join(evaluation.decided_by) or None, decision=evaluation.merged.decision))
        if request.fail_open:
            # Answered while Redis was down (a non-blocking one was held in the gateway's memory,
            # not durably appended): the record says what the agent was told. Async hooks still run.
            outcome, fail_open = RecordOutcome.FAIL_OPEN, FailOpenReason(request.fail_open)
        elif not request.blocking:
            outcome = RecordOutcome.RECORDED
        elif fail_open is not None and fail_open.answered_by_gateway:
            outcome = RecordOutcome.FAIL_OPEN
        else:
            outcome = RecordOutcome.DECIDED
        record = self._record(request, outcome, fail_open, evaluation, hook_input)
        self.outbox.settle(Settle(stream, entry_id, request, record, reply if request.blocking else None,
                                  self.policy.settings.decision_log.max_length))

    def _record(self, request: Request, outcome: RecordOutcome, fail_open: FailOpenReason | None,
                evaluation: Evaluation | None, hook_input: dict[str, Any] | None) -> LogRecord:
        """The record as it stands if the dispatcher's answer arrives in time (the settle
        script turns it into a fail-open record when it does not)."""
        merged = evaluation.merged if evaluation else MergedDecision(output={}, decision="none", reason=None)
        if hook_input is None:  # not parsed (expired entries): the log still names the session
            try:
                parsed: Any = orjson.loads(request.payload)
                hook_input = parsed if isinstance(parsed, dict) else {}
            except orjson.JSONDecodeError:
                hook_input = {}
        session_id = str(hook_input.get("session_id", ""))
        tool_name = str(hook_input.get("tool_name") or "")
        hooks = []
        if evaluation is not None:
            hooks = [{"id": r.handler_id, "type": r.handler_type, "outcome": r.outcome.value,
                      "duration_ms": round(r.duration_s * 1000, 3), "shadow": r.shadow,
                      **({"reason": r.reason} if r.reason else {})} for r in evaluation.results]
        record = LogRecord(
            event_id=request.event_id, event=request.event, tenant=request.tenant, session_id=session_id,
            tool_name=tool_name, outcome=outcome, fail_open=fail_open or "", decision=merged.decision,
            output=merged.output, payload=request.payload, received_ms=request.received_ms, decided_ms=now_ms(),
            revision=request.policy or self.policy.revision, hooks=hooks,
            shadow=evaluation.shadow if evaluation else [],
            agent_id=str(hook_input.get("agent_id") or ""), agent_type=str(hook_input.get("agent_type") or ""),
            tool_use_id=str(hook_input.get("tool_use_id") or ""), reason=merged.reason or "",
        )
        return redact_record(self.redactor, record, hook_input)  # secrets never reach the log

    async def dead_letter(self, stream: str, entry_id: bytes, fields: Mapping[bytes, bytes], why: str) -> None:
        logger.warning("dead-lettering %s %s: %s", stream, entry_id.decode(), why)
        metrics.DEAD_LETTERS.labels(stream.rsplit(":", 1)[-1]).inc()
        # Whatever the entry holds (it may not be hookbus's), moving it aside must not fail.
        dead: StreamFields = self.redactor.fields({**{k.decode("utf-8", "replace"): v for k, v in fields.items()},
                                                   "_stream": stream, "_id": entry_id, "_why": why})
        self.outbox.xadd(self.keys.dead_letter_stream, dead, DEAD_LETTER_MAXLEN)
        self.outbox.ack(stream, entry_id)

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(BusUnavailable, redis.exceptions.RedisError):
                with redis_errors():
                    await self.redis.hset(self.keys.dispatchers, self.consumer, str(now_ms()))  # type: ignore[misc]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_HEARTBEAT_S):
                    await stop.wait()

    async def _janitor(self, stop: asyncio.Event) -> None:
        """Keep in-flight entries fresh; claim entries a dead dispatcher left pending; trim the log.

        Runs until cancelled: once ``stop`` is set it only refreshes the entries still draining.
        """
        interval_s = max(0.05, self.settings.claim_idle_ms / 4000)
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await stop.wait()
            try:
                await self.refresh_inflight()
                if stop.is_set():
                    await asyncio.sleep(interval_s)
                    continue
                for stream in self.streams:
                    await self.claim(stream)
                    await self.trim_acknowledged(stream)
                await self._trim_by_age()
            except (BusUnavailable, redis.exceptions.RedisError) as exc:
                logger.debug("janitor: %s", exc)

    async def refresh_inflight(self) -> None:
        """Reset the idle time of the entries this dispatcher is handling (XCLAIM JUSTID).

        A hook may run far longer than ``claim_idle_ms``; without this its entry would look
        abandoned and be claimed, and run again, by another dispatcher or by this one.
        JUSTID leaves the delivery counter alone.
        """
        with redis_errors(self.redis_url):
            for stream, ids in self.inflight.items():
                if ids:
                    await self.redis.xclaim(stream, DISPATCH_GROUP, self.consumer, 0, list(ids), justid=True)

    async def claim(self, stream: str) -> int:
        """Take over entries idle longer than ``claim_idle_ms``; returns how many.

        XAUTOCLAIM JUSTID moves the idle entries to this consumer; each is then read with an
        XCLAIM of its own, which counts the delivery. One XCLAIM per id because Redis 6.2
        answers an entry deleted (trimmed) while pending with a nil that carries no id; such
        entries are acknowledged here (Redis 7 drops them from the pending list itself).
        """
        with redis_errors(self.redis_url):
            ids: list[bytes] = await self.redis.xautoclaim(
                stream, DISPATCH_GROUP, self.consumer, self.settings.claim_idle_ms, "0-0", count=100, justid=True
            )
            ids = [entry_id for entry_id in ids if entry_id not in self.inflight[stream]]
            if not ids:
                return 0
            async with self.redis.pipeline(transaction=False) as pipe:
                for entry_id in ids:
                    pipe.xclaim(stream, DISPATCH_GROUP, self.consumer, 0, [entry_id])
                answers = await pipe.execute()
            pending = await self.redis.xpending_range(
                stream, DISPATCH_GROUP, min=min(ids), max=max(ids), count=len(ids) + 100, consumername=self.consumer,
            )
        deliveries = {p["message_id"]: p["times_delivered"] for p in pending}
        for entry_id, answer in zip(ids, answers, strict=True):
            if not answer:  # acknowledged meanwhile, or deleted and dropped from the PEL (Redis 7)
                continue
            fields = answer[0][1]
            if fields is None:  # deleted from the stream (trimmed) while pending (Redis 6.2)
                logger.warning("dropping %s %s: deleted from the stream while pending", stream, entry_id.decode())
                self.outbox.ack(stream, entry_id)
                continue
            if deliveries.get(entry_id, 0) > self.settings.max_deliveries:
                why = f"delivered more than {self.settings.max_deliveries} times"
                await self.dead_letter(stream, entry_id, fields, why)
                continue
            logger.info("claimed %s %s from a dead dispatcher", stream, entry_id.decode())
            await self._spawn(stream, entry_id, fields)
        return len(ids)

    async def trim_acknowledged(self, stream: str) -> None:
        """Drop entries every consumer is done with: work streams are queues, not logs.

        Everything older than the oldest pending entry and already delivered to the group
        has been settled (its record is in the decision log), so it can go.
        """
        with redis_errors(self.redis_url):
            summary = await self.redis.xpending(stream, DISPATCH_GROUP)
            if summary["pending"]:
                min_id = summary["min"]
            else:
                groups = await self.redis.xinfo_groups(stream)
                group = next((g for g in groups if g["name"] == DISPATCH_GROUP.encode()), None)
                if group is None:
                    return
                last = group["last-delivered-id"]
                ms, _, seq = last.partition(b"-")
                min_id = f"{int(ms)}-{int(seq or 0) + 1}".encode()
            await self.redis.xtrim(stream, minid=min_id, approximate=False)

    async def _trim_by_age(self) -> None:
        """Enforce ``hookbus.decisionLog`` exactly: each record's XADD trims by length only about
        (whole stream nodes), so the janitor trims to ``maxLength`` and ``maxAgeSeconds`` exactly."""
        retention = self.policy.settings.decision_log
        with redis_errors(self.redis_url):
            await self.redis.xtrim(self.keys.decision_log, maxlen=retention.max_length, approximate=False)
            if retention.max_age_seconds is not None:
                min_id = f"{now_ms() - int(retention.max_age_seconds * 1000)}-0"
                await self.redis.xtrim(self.keys.decision_log, minid=min_id, approximate=False)


__all__ = ["Dispatcher"]
