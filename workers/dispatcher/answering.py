"""The dispatcher: what each event on the work streams means, and its answer.

Each dispatcher reads batches of entries (through :class:`workers.dispatcher.streams.WorkStreams`,
which also claims, dead-letters, keeps in-flight entries fresh and trims), evaluates every
event concurrently (bounded) under the policy versions its gateway chose, and queues its
settlement with the outbox: the decision-log record (masked), the reply of a blocking event,
its async hook jobs and the acknowledgement, written atomically by :mod:`bus.stream.settle` (with
arq on a Redis of its own, the jobs are queued just before, see :mod:`workers.jobs.enqueue`). A blocking
event whose input is over 64 KiB has its record masked in a worker thread: its reply is published as
soon as it is decided (:meth:`workers.dispatcher.outbox.Outbox.answer`), and the settle that writes
the record later does not answer again. Blocking work whose deadline has passed is not evaluated:
the gateway answered fail-open, and that is what the record says. Events of a session with state
take turns (:mod:`workers.dispatcher.turns`). SIGTERM stops reading, finishes
in-flight work and leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from bus.errors import ProtocolError
from bus.hooks.decisions import Decision, FailOpenReason, RecordOutcome
from bus.hooks.plugins import PluginError, load_plugins
from bus.policy.loading import Policy
from bus.policy.registry import PolicyRegistry
from bus.policy.reload import PolicyWatcher
from bus.redaction.redact import install_log_redaction, redactor_for
from bus.redis.topology import Topology
from bus.rules.limits import json_depth_over
from bus.runtime import tracing
from bus.runtime.logs import event_fields
from bus.runtime.metrics import Metrics, event_label, process_metrics
from bus.runtime.settings import Settings
from bus.session.definitions import session_policy
from bus.stream.partitions import warn_partitions_changed
from bus.stream.protocol import Reply, Request
from workers.dispatcher.outbox import Outbox, Settle
from workers.dispatcher.records import INLINE_MASK_BYTES, evaluation_reply, stored_record
from workers.dispatcher.sessions import SessionStates
from workers.dispatcher.slots import DispatchSlots
from workers.dispatcher.streams import WorkStreams, log_maxlen
from workers.dispatcher.tracing import DispatchTraces
from workers.dispatcher.turns import SessionTurns, turn_wait_s
from workers.engine.evaluation import Engine, Evaluation
from workers.handlers.runners import default_runners
from workers.jobs.enqueue import JobQueue, PreparedJob, arq_pool
from workers.outbound.notices import notices_of
from workers.services import Services

#: An entry taken in hand: its stream, id and fields, and the request they decode to (None: they do not).
_InHand = tuple[str, bytes, Mapping[bytes, bytes], Request | None]


def _settle_only(request: Request | None) -> bool:
    """Whether ``request`` is a blocking event already answered or past its deadline: it is only settled."""
    return request is not None and request.blocking and bool(request.fail_open or request.expired())


logger = logging.getLogger("hookbus.dispatcher")

#: Entries spawned between two yields to the event loop. Without them a whole batch is evaluated
#: before the first settlement leaves, so a batch moves through gateway, dispatcher and Redis as
#: one convoy and each process idles while another works (wrk against one dispatcher: 1.4-1.7x the
#: decisions/s of never yielding; every 4, 8 or 16 entries alike, every 2 less).
_YIELD_EVERY = 8


class Dispatcher:
    """One dispatcher process (or task): reads, evaluates, replies, logs, acknowledges."""

    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        redis_url: str,
        *,
        consumer: str | None = None,
        jobs_in_settle: bool | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """``jobs_in_settle``: arq's queue is on the bus's Redis, so each event's settle script
        queues its async jobs; False when it is not (they are queued, at least once, before).
        By default, whether the queue's Redis (``HOOKBUS_QUEUE_REDIS_URL``) is the bus's."""
        self.metrics = metrics or process_metrics()
        load_plugins(policy.settings.plugins)  # each registers its plugin callbacks; PluginError if one fails
        self.settings = settings
        self.policy = policy
        #: Masks what this dispatcher stores (records, dead letters); handlers see the real input.
        self.redactor = redactor_for(policy.settings.redact)
        install_log_redaction()
        self.redis_url = redis_url
        #: The bus's partitions are fixed when the node starts (a reload cannot move a session's events).
        self.keys = settings.keys.with_partitions(policy.settings.streams.partitions)
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        #: A single Redis or a Redis Cluster, read once from the URL: what differs asks it.
        self.topology = Topology.from_url(redis_url)
        # No per-command socket timer (it costs a timer per read); the read loop has its own bound.
        self.redis = self.topology.connect(socket_timeout_s=None)
        self.outbox = Outbox(
            self.redis,
            self.keys,
            redis_url,
            on_written=self._settled,
            on_refused=self._settled,
            on_session=lambda op, written, state: self.sessions.settled(op, written, state),
            metrics=self.metrics,
            topology=self.topology,
            reply_key=settings.reply_key,
        )
        self.work = WorkStreams(
            settings,
            self.keys,
            self.redis,
            redis_url,
            self.outbox,
            self.consumer,
            spawn=self._spawn,
            redact=lambda fields: self.redactor.fields(fields),
            retention=lambda: self.policy.settings.decision_log,
            metrics=self.metrics,
            topology=self.topology,
        )
        queue_url = settings.queue_url_for(redis_url)  # ConfigError for a cluster
        self.arq = arq_pool(queue_url)
        self.jobs_in_settle = queue_url == redis_url if jobs_in_settle is None else jobs_in_settle
        self.job_queue = JobQueue(self.arq, self.keys, queue_url, metrics=self.metrics)
        self.services = Services(settings, self.redis)
        self.engine = Engine(
            policy,
            self.redis,
            self.keys,
            default_runners(),
            async_handlers="jobs",
            services=self.services,
            metrics=self.metrics,
            topology=self.topology,
        )
        self.traces = DispatchTraces(settings.tracing.always)
        #: This dispatcher's copy of the states of the sessions it decides (hookbus.session).
        self.sessions = SessionStates(self.keys, self.metrics, self._redo, self.redis, self.engine.fleet_values)
        #: One decision at a time per session: the next is decided on the state the last one settled.
        self.turns = SessionTurns()
        #: The slots for events in hand, and each tenant's share of them.
        self.slots: DispatchSlots[_InHand] = DispatchSlots.for_settings(
            settings.dispatch_concurrency, settings.tenant_dispatch_slots
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.registry = PolicyRegistry(
            policy, self.redis, self.keys, metrics=self.metrics, trusted_keys=settings.policy_trusted_keys
        )
        self.watcher = PolicyWatcher(settings.policy_paths, self.set_policy, metrics=self.metrics)

    def set_policy(self, policy: Policy) -> None:
        """Swap in a reloaded policy; events in flight finish under the old one."""
        try:
            load_plugins(policy.settings.plugins)
        except PluginError as exc:
            self.metrics.policy_load_failures.inc()
            logger.error("policy reload: %s; keeping the running policy", exc)
            return
        warn_partitions_changed(self.keys, policy)
        self.policy = policy
        self.redactor = redactor_for(policy.settings.redact)
        self.engine.policy = policy
        self.registry.set_base(policy)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then drain in-flight work."""
        await self.outbox.start()
        await asyncio.gather(self.registry.start(), self.watcher.start(), self.engine.freezes.start())
        helpers = [
            asyncio.create_task(self.work.heartbeat(stop), name="hookbus-heartbeat"),
            asyncio.create_task(self.work.janitor(stop), name="hookbus-janitor"),
            asyncio.create_task(notices_of(self).run(stop), name="hookbus-approval-notices"),
            asyncio.create_task(self.engine.fleet_values.poll(stop), name="hookbus-tenant-counters"),
        ]
        if self.sessions.fleet is not None:  # tenant counts a dead dispatcher left pending
            helpers.append(asyncio.create_task(self.sessions.fleet.sweep(stop), name="hookbus-pending-counts"))
        waker = asyncio.create_task(self.work.wake_reader(stop), name="hookbus-wake-reader")
        logger.info("dispatcher %s serving (policy %s)", self.consumer, self.policy.revision)
        try:
            await self._serve(stop)
        finally:
            waker.cancel()
            await asyncio.gather(waker, return_exceptions=True)
            # The janitor goes on refreshing the in-flight entries while they drain.
            for tenant, parked in self.slots.unpark():  # each settled before this dispatcher stops
                self._start(tenant, *parked)
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=10)
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await asyncio.gather(self.watcher.stop(), self.registry.stop(), self.engine.freezes.stop())
            await self.outbox.stop()
            await self.work.close()
            await self.redis.aclose()
            await asyncio.gather(self.arq.aclose(), self.services.aclose())
            logger.info("dispatcher %s stopped", self.consumer)

    async def _serve(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for n, (stream, entry_id, fields) in enumerate(await self.work.read(stop), 1):
                await self._spawn(stream, entry_id, fields)
                if n % _YIELD_EVERY == 0:  # the evaluated ones settle while the rest wait
                    await asyncio.sleep(0)

    async def _spawn(self, stream: str, entry_id: bytes, fields: Mapping[bytes, bytes]) -> None:
        """Take an entry in hand: started once it holds a slot, or parked over its tenant's share."""
        try:
            request: Request | None = Request.decode(fields)
        except Exception:  # decoded again in its own task, which dead-letters it: never the reader's failure
            request = None
        tenant = request.tenant if request is not None else ""
        self.work.inflight[stream].add(entry_id)  # parked too: in hand, kept fresh, never claimed by others
        if await self.slots.take(tenant, (stream, entry_id, fields, request), over_share=_settle_only(request)):
            self._start(tenant, stream, entry_id, fields, request)

    def _start(
        self, tenant: str, stream: str, entry_id: bytes, fields: Mapping[bytes, bytes], request: Request | None
    ) -> None:
        work = self.handle(stream, entry_id, fields) if request is None else self._handle(stream, entry_id, request)
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, tenant, stream, entry_id))

    def _done(self, task: asyncio.Task[None], tenant: str, stream: str, entry_id: bytes) -> None:
        # The entry stays in flight (kept fresh, never claimed by others) until the outbox has
        # written its settlement: with Redis refusing writes that may take a while.
        self._tasks.discard(task)
        if (following := self.slots.give_back(tenant)) is not None:  # the tenant's next parked entry
            self._start(tenant, *following)
        if task.cancelled() or task.exception() is not None:
            self._ended(stream, entry_id)
            if not task.cancelled():
                logger.error("dispatch task failed", exc_info=task.exception())

    def _redo(self, op: Settle) -> None:
        """Decide ``op``'s event again: its session changed since (the entry stays in flight)."""
        task = asyncio.create_task(self._handle(op.stream, op.entry_id, op.request, op.attempt + 1))
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._redone(done, op))

    def _redone(self, task: asyncio.Task[None], op: Settle) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is not None:
            self._ended(op.stream, op.entry_id)
            if not task.cancelled():
                logger.error("deciding an event again failed", exc_info=task.exception())

    def _settled(self, stream: str, entry_id: bytes) -> None:
        self._ended(stream, entry_id)
        if tracing.on:
            self.traces.settled(stream, entry_id)

    def _ended(self, stream: str, entry_id: bytes) -> None:
        """Whatever ended the entry (its settle written or refused, its task failed): its session's turn passes on."""
        self.work.settled(stream, entry_id)
        self.turns.release((stream, entry_id))

    async def handle(self, stream: str, entry_id: bytes, fields: Mapping[bytes, bytes]) -> None:
        """Evaluate one entry and queue its settlement: record, reply and acknowledgement at once."""
        try:
            request = Request.decode(fields)
        except ProtocolError as exc:
            await self.work.dead_letter(stream, entry_id, fields, str(exc))
            return
        await self._handle(stream, entry_id, request)

    async def _handle(self, stream: str, entry_id: bytes, request: Request, attempt: int = 0) -> None:
        """:meth:`handle` of a decoded entry; ``attempt``: times it was decided on an older session state."""
        span = self.traces.read(stream, entry_id, request) if tracing.on and not attempt else None
        partition, state_key, went_ahead = self.work.partition[stream], "", None
        evaluation: Evaluation | None = None
        hook_input: dict[str, Any] | None = None
        reply: Reply | None = None
        fail_open: FailOpenReason | None = None
        answered: Reply | None = None
        if request.blocking and not request.fail_open and request.expired() and self._answers_early(request):
            # Re-delivered after its dispatcher answered it early and stopped before settling: the
            # record says what the agent got.
            try:
                answered = await self.outbox.answered(request, self.work.partition[stream])
            except Exception as exc:  # the settle still writes one record, from what this dispatcher knows
                logger.warning("could not read the reply %s was answered with: %s", request.event_id, exc)
        late = _settle_only(request)
        if not late:
            try:
                hook_input = request.hook_input()
                policy = await self.registry.resolve(request.tenant, request.policy)
                limit = policy.settings.limits.nesting_depth
                if json_depth_over(request.payload, hook_input, limit) is not None:  # the gateway refuses these
                    raise ValueError(f"hook input nested more than {limit} deep (hookbus.limits.nestingDepth)")
                if session_policy(policy).defined:
                    state_key = self.sessions.key_of(request, str(hook_input.get("session_id", "")), partition)
                    # held until its settle is answered (a redo holds it still); waited for when another holds it
                    if not attempt and not self.turns.hold(state_key, (stream, entry_id)):
                        await self.turns.take(state_key, (stream, entry_id), turn_wait_s(request))
                        late = request.expired()
                if not late:
                    state = self.sessions.get(state_key) if state_key else None
                    evaluation = await self.engine.evaluate(request, hook_input, policy, state)
            except Exception:  # the agent must get an answer whatever happens here
                logger.exception(
                    "evaluating %s %s failed",
                    request.event,
                    request.event_id,
                    extra=event_fields(
                        request.event_id,
                        request.event,
                        request.tenant,
                        hook_input.get("session_id") if isinstance(hook_input, dict) else None,
                    ),
                )
                fail_open = FailOpenReason.DISPATCHER_ERROR
                reply = Reply(request.event_id, {}, Decision.NONE, fail_open)
                await self.engine.restore_context(request)
            if evaluation is not None:
                fail_open = evaluation.fail_open
                reply = evaluation_reply(request, evaluation)
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug(
                        "decided %s",
                        evaluation.merged.decision,
                        extra=event_fields(
                            request.event_id,
                            request.event,
                            request.tenant,
                            (hook_input or {}).get("session_id"),
                            ",".join(evaluation.decided_by) or None,
                            decision=evaluation.merged.decision,
                        ),
                    )
        if late:
            # The gateway has answered already (fail open): only the record is left to write.
            self.metrics.expired.labels(event_label(request.event)).inc()
            if not request.fail_open and not attempt:  # it waited past its deadline (not spooled in an outage)
                self.metrics.child(self.metrics.timeouts, "queue_wait").inc()
            await self.engine.restore_context(request)  # what its append took waits for the next turn
            state_key, went_ahead = await self.sessions.went_ahead(request, partition, self.registry.resolve)
        reply_json = b""
        if reply is not None and request.blocking:
            try:
                reply_json = reply.encode()
            except (TypeError, ValueError) as exc:  # a handler's output orjson cannot write (nested too deep)
                logger.error(
                    "the reply to %s %s cannot be written (%s); failing open", request.event, request.event_id, exc
                )
                fail_open = FailOpenReason.DISPATCHER_ERROR
                reply, evaluation = Reply(request.event_id, {}, Decision.NONE, fail_open), None
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
        answering: asyncio.Task[bool] | None = None
        session = evaluation.session if evaluation is not None and state_key else went_ahead
        if (
            outcome is RecordOutcome.DECIDED
            and reply is not None
            and self._answers_early(request)
            and (session is None or session.expected is None)  # a decision on the session's state waits for it
        ):
            # Its record is masked in a thread: the agent does not wait for it (the settle that
            # writes it later does not answer again).
            answering = asyncio.create_task(self.outbox.answer(request, reply, self.work.partition[stream]))
        record, record_meta = await stored_record(
            self.redactor, self.policy.revision, request, outcome, fail_open, evaluation, hook_input
        )
        if answering is not None:
            await answering
        if answered is not None:
            record.decision, record.fail_open = answered.decision, answered.fail_open or ""
            with contextlib.suppress(Exception):  # the output too when it can be masked
                record.output = self.redactor.value(answered.output, ("output",))
            record_meta = b""  # changed since: encoded again by the settle
        if span is not None:
            self.traces.settling(stream, entry_id, span, record)
            record_meta = b""
        jobs: list[PreparedJob] = evaluation.jobs if evaluation is not None else []
        if jobs and not self.jobs_in_settle:
            await self.job_queue.put(request, jobs)
            jobs = []
        self.outbox.settle(
            Settle(
                stream,
                entry_id,
                request,
                record,
                reply if request.blocking else None,
                log_maxlen(self.policy.settings.decision_log, self.keys),
                jobs,
                partition=partition,
                session=None
                if session is None
                else self.sessions.part(request, partition, state_key, session, attempt),
                attempt=attempt,
                record_meta=record_meta,
                reply_json=reply_json,
            )
        )

    @staticmethod
    def _answers_early(request: Request) -> bool:
        """Whether ``request`` is answered before its record is ready: a blocking event whose
        record is masked in a thread (small ones are answered by the settle that writes it)."""
        return request.blocking and not request.fail_open and len(request.payload) > INLINE_MASK_BYTES


__all__ = ["Dispatcher"]
