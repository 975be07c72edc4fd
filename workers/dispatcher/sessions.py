"""A dispatcher's copy of the states of the sessions it decides (``hookbus.session``).

Deciding an event reads its session's state with no Redis round trip of its own: from this
copy, which every settle of a session event refreshes with the state the script wrote (the
script returns it, :mod:`bus.session.script`), or moves on in place when the script applied the
event's operations to the very state this copy holds (it then answers only when it applied
them: no copy of the state's fields per event). The copy may be behind: another dispatcher
settled an event of the session, or this one forgot it (a bounded LRU). Then the settle of an
event whose decision read the state finds another version and refuses it, returning the state
as it is; this copy takes it and the event is decided again (:meth:`SessionStates.settled`).
Events of one session decided by one dispatcher take turns (:mod:`workers.dispatcher.turns`), so
a refusal means another writer moved the session on. A blocking event is decided again until it
settles or its deadline passes; a non-blocking one (no answer waits for it), after
:data:`MAX_ATTEMPTS` refusals, is settled on the last decision without the check (counted:
``hookbus_session_conflicts_total`` counts every refusal, ``hookbus_session_unchecked_settles_total``
every event settled so).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import orjson
import redis.asyncio as aioredis

from bus.hooks.decisions import Decision
from bus.policy.loading import Policy
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.runtime.sessionmetrics import session_families
from bus.session.apply import apply_ops, changed_by, same_at, written_at
from bus.session.definitions import VERSION_FIELD
from bus.session.state import SessionState
from bus.stream.protocol import Request
from workers.dispatcher.fleet import FleetCounts
from workers.dispatcher.outbox import Settle
from workers.engine.fleetvalues import FleetValues
from workers.engine.sessions import SessionJudge, SessionOutcome

logger = logging.getLogger("hookbus.dispatcher")

#: Sessions whose state a dispatcher keeps a copy of (the least recently used go first).
CACHED_SESSIONS: Final = 10_000
#: Times a non-blocking event is decided again on a newer state before it is settled without the check.
MAX_ATTEMPTS: Final = 4


class SessionStates:
    """The states of recently seen sessions, by their state key."""

    def __init__(
        self,
        keys: Keyspace,
        metrics: Metrics,
        redo: Callable[[Settle], None],
        redis: aioredis.Redis | None = None,
        values: FleetValues | None = None,
    ) -> None:
        """``redo(op)``: decide ``op``'s event again (its session changed since its decision);
        ``redis``: where tenant and agent counters are counted (none: they are not)."""
        self.keys, self.metrics, self._redo = keys, session_families(metrics), redo
        self.fleet = None if redis is None else FleetCounts(redis, keys, self.metrics, values)
        self._states: collections.OrderedDict[str, SessionState] = collections.OrderedDict()
        #: The state keys of recent sessions (spelling a key costs more than finding it here).
        self._keys: dict[tuple[str, str, int], str] = {}

    def key_of(self, request: Request, session_id: str, partition: int) -> str:
        """The key of the state of ``request``'s session (``session_id``) in ``partition``."""
        found = self._keys.get(named := (request.tenant, session_id, partition))
        if found is None:
            if len(self._keys) >= CACHED_SESSIONS:
                self._keys.clear()
            found = self._keys[named] = self.keys.session_state(request.tenant, session_id, partition)
        return found

    def get(self, key: str) -> SessionState:
        """The last state seen of the session at ``key`` (empty when none is known)."""
        found = self._states.get(key)
        if found is None:
            return SessionState()
        self._states.move_to_end(key)
        return found

    def put(self, key: str, state: SessionState, ops: Sequence[str] | None = None) -> None:
        """Keep ``state`` as the session's: the settle script's answer is the state as it is (one
        writer task settles in order; a lower version than known means the state was evicted or
        expired and started again). ``ops``: the operations the settle applied to make it, which
        tell what changed since the last state kept (else the two are compared), so that what
        was worked out on that one carries over."""
        prior = self._states.get(key)
        changed = None if prior is None or not prior.memo or not ops else changed_by(prior, state, ops)
        self._keep(key, state.following(prior, changed))

    def _keep(self, key: str, state: SessionState) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > CACHED_SESSIONS:
            self._states.popitem(last=False)

    def part(
        self, request: Request, partition: int, key: str, outcome: SessionOutcome, attempt: int
    ) -> tuple[SessionOutcome, str, str]:
        """The session part of an event's settle: a non-blocking event's past :data:`MAX_ATTEMPTS`
        without the check (no answer depends on it). A blocking one is always checked: it is decided
        again until it settles or its deadline passes (the gateway then answered it fail-open, and
        it is settled as a call that went ahead)."""
        if attempt >= MAX_ATTEMPTS and outcome.expected is not None and not request.blocking:
            logger.warning("event %s decided %d times on a changing session: settled as is", request.event_id, attempt)
            self.metrics.unchecked.inc()
            outcome.expected = None
        return outcome, key, self.keys.session_index(request.tenant, partition)

    async def went_ahead(
        self, request: Request, partition: int, resolve: Callable[[str, str], Awaitable[Policy]]
    ) -> tuple[str, SessionOutcome | None]:
        """What a blocking event the gateway answered fail-open (never evaluated: it waited past its
        deadline, or came in an outage) does to its session: its call went ahead. ``("", None)``
        when its policy keeps no session state, or its input or policy cannot be read."""
        try:
            hook_input = request.hook_input()
            policy = await resolve(request.tenant, request.policy)
        except Exception as exc:  # the record is still written; only the state misses this event
            logger.warning("the session state misses %s, which was never evaluated: %s", request.event_id, exc)
            return "", None
        judge = SessionJudge.of(policy, None)
        if judge is None:
            return "", None
        key = self.key_of(request, str(hook_input.get("session_id", "")), partition)
        return key, judge.outcome(request.event, hook_input, Decision.NONE)

    def settled(self, op: Settle, written: bool, raw: bytes) -> None:
        """The settle script's answer for ``op``'s session: keep the state; if it was not written, decide again."""
        assert op.session is not None
        outcome, key, _ = op.session
        found = self.answered(key, outcome, written, raw)
        if evicted := int(found.get("e") or 0):
            self.metrics.evictions.inc(evicted)
        if not written:
            self.metrics.conflicts.inc()
            self._redo(op)
        elif self.fleet is not None:
            self.fleet.start(op.request, outcome.fleet, op.partition)

    def answered(self, key: str, outcome: SessionOutcome, written: bool, raw: bytes) -> dict[str, Any]:
        """Keep the state a settle answered (:mod:`bus.session.script`): the whole state, or the
        time it applied the event's operations to the state this copy holds (the one the event
        was decided on, as it is now), which moves on alike, in place; returns the answer read."""
        try:
            found: dict[str, Any] = orjson.loads(raw)
            base, at = outcome.decided_on, found.get("n")
            if written and at is not None and base is not None:
                now = int(at)
                if self._states.get(key) is base:
                    over = outcome.over
                    if (
                        over is not None
                        and base.fields.get(VERSION_FIELD) == outcome.seen  # as the decision saw it
                        and (not outcome.timed or same_at(base, outcome.ops, outcome.over_ms, now))
                    ):
                        base.advance(over)  # the very fields the settle wrote
                    else:
                        base.advance(written_at(base.fields, outcome.ops, now))
                    self._states.move_to_end(key)
                    return found
                self.put(key, apply_ops(base, outcome.ops, now))  # this copy forgot it meanwhile
                return found
            state = SessionState.of(found.get("s"))
        except (ValueError, AttributeError, TypeError) as exc:
            logger.warning("the session state returned for %s is unreadable: %s", key, exc)
            state, found = SessionState(), {}
        self.put(key, state, outcome.ops if written else None)
        return found


__all__ = ["CACHED_SESSIONS", "MAX_ATTEMPTS", "SessionStates"]
