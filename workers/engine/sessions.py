"""The session's part in deciding one event (``hookbus.session`` and ``when:``).

:class:`SessionJudge` reads the session's state as the dispatcher knows it: it drops the
handlers whose ``when:`` does not hold, names the facts behind the answers of those whose
``when:`` does, adds the session's own answers (budgets, the loop gate) and, once the event is
decided, says what it changes (:class:`SessionOutcome`, applied by the settle script). If the
decision read the state, the outcome names the version it read: the settle refuses it when
another event of the session settled meanwhile, and the event is decided again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from bus.hooks.results import HandlerResult
from bus.policy.compiled import CompiledHandler
from bus.policy.loading import Policy
from bus.policy.rulelists import Call
from bus.session.apply import laid_over
from bus.session.conditions import Conditions
from bus.session.definitions import FIRST_SEEN_FIELD, VERSION_FIELD, Counter, Matched, SessionPolicy, session_policy
from bus.session.effects import STOPPED, effects, facts_note, handed, timed, verdicts
from bus.session.state import SessionState, SessionView


@dataclasses.dataclass(slots=True)
class SessionOutcome:
    """What one decided event does to its session's state."""

    #: The operations the settle applies (:func:`bus.session.effects.effects`).
    ops: list[str]
    #: The state's version the decision read; None when it read none.
    expected: int | None
    #: The session's facts once the event is settled (the record's ``facts``).
    facts: list[str]
    ttl_ms: int
    max_sessions: int
    #: The tenant and agent counters the event counts once it is settled (:mod:`workers.dispatcher.fleet`).
    fleet: list[Counter] = dataclasses.field(default_factory=list)
    #: The budgets the event moves (every budget on a session's first event), each with its units
    #: left once it is settled (the record's ``budgets``).
    budgets: dict[str, float] = dataclasses.field(default_factory=dict)
    #: The state the event was decided on: the dispatcher's copy of the session's state, which
    #: moves on in place once an event of the session settles (:attr:`known` reads it as it is).
    decided_on: SessionState | None = None
    #: What the event's operations, applied at :attr:`over_ms`, lay over the state's fields as the
    #: decision saw it at version :attr:`seen` (:func:`bus.session.apply.laid_over`): the state
    #: moves on so when the settle applied them to that version at the same time in effect
    #: (:meth:`bus.session.state.SessionState.advance`).
    over: dict[str, str] | None = None
    over_ms: int = 0
    seen: str | None = None
    #: Whether what the operations write depends on when the settle applies them (a fact set or
    #: cleared, a window's bucket, the session's first-seen time; :func:`bus.session.apply.same_at`).
    timed: bool = True

    def settle_args(self, pending: str) -> list[Any]:
        """The ARGV the event's settle call adds for its session, in the order the script reads
        them (``pending``: :func:`workers.dispatcher.fleet.pending_entry` of its tenant counts)."""
        expected = "" if self.expected is None else str(self.expected)
        return ["\n".join(self.ops), expected, self.ttl_ms, self.max_sessions, pending, self.known]

    @property
    def known(self) -> str:
        """``<version>:<first seen>`` of :attr:`decided_on` as it is now (``''``: none, or an empty
        state): the settle answers the time it applied the operations instead of the whole state
        when the session's state is still that one."""
        state = self.decided_on
        if state is None or not state.fields:
            return ""
        fields = state.fields  # the text the script compares, as it reads it: no number made of it
        return f"{fields.get(VERSION_FIELD) or '0'}:{fields.get(FIRST_SEEN_FIELD, '')}"


class SessionJudge(SessionView):
    """One event's view of its session under one policy."""

    __slots__ = ("_matched", "_seen", "read")

    def __init__(
        self,
        policy: SessionPolicy,
        state: SessionState,
        at_ms: int | None = None,
        fleet: Callable[[Counter], float] | None = None,
    ) -> None:
        # the view's attributes set here rather than by its __init__: one call less per event
        self.policy, self.state, self.fleet = policy, state, fleet
        self.now_ms = time.time_ns() // 1_000_000 if at_ms is None else at_ms  # now_ms(), inline
        self.used, self._facts = {}, {}
        self.read = False
        self._matched: Matched | None = None
        # the version decided on: the state may move on in place while the event is decided
        self._seen = state.fields.get(VERSION_FIELD)

    def matched(self, event: str, hook_input: Mapping[str, Any], call: Call | None = None) -> Matched:
        """What the event's triggers match (worked out once per event; ``call``: its tool call as
        the rule handlers read it, if they did)."""
        if self._matched is None:
            self._matched = self.policy.matched(event, hook_input, call)
        return self._matched

    @classmethod
    def of(
        cls,
        policy: Policy,
        state: SessionState | None,
        at_ms: int | None = None,
        fleet: Callable[[Counter], float] | None = None,
    ) -> SessionJudge | None:
        """A judge for ``policy``'s session definitions (at ``at_ms``, default now; ``fleet``: the
        event's tenant and agent counters as this process knows them); None when it keeps no state."""
        compiled = session_policy(policy)
        return cls(compiled, state or SessionState(), at_ms, fleet) if compiled.defined else None

    def keep(self, handlers: Sequence[CompiledHandler]) -> Sequence[CompiledHandler]:
        """The handlers whose ``when:`` holds (or that have none), for reading only; one whose
        ``when:`` held on facts as a copy that names them in the reason of its answers
        (:attr:`CompiledHandler.note`)."""
        same = self.policy.plans.get(id(handlers))  # _plan(), its first step inline: most events find it so
        plan = same[1] if same is not None and same[0] is handlers else _plan(self.policy, handlers)
        if plan is None:
            return handlers
        self.read = True
        answers = plan.conditions.answers(self)
        if plan.last is not None and plan.last[0] is answers:  # the same answers: the same handlers
            return plan.last[1]
        kept: list[CompiledHandler] = []
        for n, (handler, position) in enumerate(plan.handlers):
            if position is None:
                kept.append(handler)
            elif (facts := answers[position]) is not None:
                kept.append(plan.noted(n, handler, facts) if facts else handler)
        plan.last = (answers, tuple(kept))  # answers kept on the state are found again as they are
        return kept

    def answers(
        self, results: list[HandlerResult], event: str, hook_input: Mapping[str, Any], call: Call | None = None
    ) -> list[HandlerResult]:
        """``results`` then the session's own answers (``call``: the event's tool call as the rule
        handlers read it, if they did)."""
        if not self.policy.decides:
            return results
        matched = self._matched
        if matched is None:  # matched(), inline
            matched = self._matched = self.policy.matched(event, hook_input, call)
        own = verdicts(self, event, matched)
        if event == "PreToolUse":
            self.read = True
        return [*results, *own] if own else results

    def handed(self) -> dict[str, Any]:
        """What the event's handlers are given of the session (``hookbus.session``), before the event."""
        return handed(self)

    def outcome(
        self, event: str, hook_input: Mapping[str, Any], decision: str, call: Call | None = None
    ) -> SessionOutcome:
        """What ``event``, answered ``decision``, does to the session (``call``: as :meth:`answers`)."""
        policy, state = self.policy, self.state
        matched = self._matched
        if matched is None:
            matched = self._matched = policy.matched(event, hook_input, call)
        if event == "PreToolUse" and (kept_ops := matched.pre_ops) is not None and decision not in STOPPED:
            ops, timed_ops, counts = list(kept_ops), matched.pre_timed, matched.pre_counts  # effects(), kept
        else:
            ops, counts = effects(policy, event, hook_input, decision, matched), None
            timed_ops = timed(ops)
        now = self.facts()
        if matched.set or matched.clear:  # the facts the operations set and clear
            facts = dict.fromkeys(now)
            by_field = policy.fact_by_field
            for op in ops:
                code, _, rest = op.partition(" ")
                name = by_field.get(rest.split(" ")[0])
                if name is not None and code == "S":
                    facts[name] = None
                elif name is not None and code == "D":
                    facts.pop(name, None)
            now = list(facts)
        fields, seen = state.fields, self._seen
        version = int(seen) if seen and seen.isdecimal() else 0  # state.version, inline
        expected = version if self.read else None
        fleet = (
            [
                counter
                for name in matched.count
                if (counter := policy.fleet.get(name)) is not None
                and (not counter.decisions or str(decision) in counter.decisions)
            ]
            if policy.fleet and matched.count
            else []
        )
        over: dict[str, str] | None = None
        budgets: dict[str, float] = {}
        if policy.budgets:  # the budgets the event moves, and what is left of them once it is settled
            if counts is None or fields.get(VERSION_FIELD) != seen:
                over = laid_over(state, ops, self.now_ms)
            else:  # laid_over(), inline for operations that only count
                over = written = {}
                for field in counts:  # a loop, not a comprehension: no call
                    written[field] = str(int(fields.get(field) or 0) + 1)
                if FIRST_SEEN_FIELD not in fields:
                    written[FIRST_SEEN_FIELD] = str(self.now_ms)
                written[VERSION_FIELD] = str(version + 1)
            if over is not None:
                on = matched.pre_budgets if counts is not None and not policy.budgets_unread else None
                if on is not None:  # budgets_moved(), inline: each a count in one field the event counts
                    for name, limit, count_field in on:
                        raw = over[count_field]
                        budgets[name] = max(0.0, limit - (int(raw) if raw.isdecimal() else 0))
                else:
                    budgets = self.budgets_moved(over)
            if not version:  # a session's first event: every budget, so that the session's readers know them all
                after = state if over is None else SessionState({**fields, **over})
                budgets = SessionView(policy, after, self.now_ms, self.fleet).budgets_left()
        timed_ops = timed_ops or FIRST_SEEN_FIELD not in fields
        return SessionOutcome(
            ops,
            expected,
            now,
            policy.ttl_ms,
            policy.max_sessions,
            fleet,
            budgets,
            state,
            over,
            self.now_ms,
            seen,
            timed_ops,
        )


@dataclasses.dataclass(slots=True)
class _Plan:
    """How one choice of handlers is kept: each handler and its condition's position (None: it has none)."""

    handlers: tuple[tuple[CompiledHandler, int | None], ...]
    conditions: Conditions
    #: The policy whose plan it is (which bounds the copies its plans keep in all).
    policy: SessionPolicy
    #: The last answers and the handlers they kept (the same answers: the same handlers).
    last: tuple[list[list[str] | None], tuple[CompiledHandler, ...]] | None = None
    #: The copies of handlers that name facts, per position and facts (:meth:`noted`).
    copies: dict[tuple[int, tuple[str, ...]], CompiledHandler] = dataclasses.field(default_factory=dict)

    def noted(self, position: int, handler: CompiledHandler, facts: list[str]) -> CompiledHandler:
        """``handler`` (at ``position`` among :attr:`handlers`) as a copy that names ``facts`` in the
        reason of its answers, made once per setting of them (past :data:`NOTED_PER_PLAN` in the plan
        or :data:`NOTED_PER_POLICY` in all the policy's plans, afresh)."""
        key = (position, tuple(facts))
        found = self.copies.get(key)
        if found is None:
            policy = self.policy
            if policy.noted >= NOTED_PER_POLICY:  # every plan's copies go: a few plans must not hold them all
                for _, plan in policy.plans.values():
                    if plan is not None:
                        plan.copies.clear()
                        plan.last = None
                policy.noted = 0
            elif len(self.copies) >= NOTED_PER_PLAN:
                policy.noted -= len(self.copies)
                self.copies.clear()
            found = self.copies[key] = dataclasses.replace(handler, note=facts_note(facts))
            policy.noted += 1
        return found


#: Plans kept per choice of handlers and per policy (past it, they start again).
PLANS_PER_POLICY: Final = 1024
#: Copies of handlers naming facts kept per plan, and in all the plans of a policy (past either, they start again).
NOTED_PER_PLAN: Final = 1024
NOTED_PER_POLICY: Final = 16384


def _plan(policy: SessionPolicy, chosen: Sequence[CompiledHandler]) -> _Plan | None:
    """The plan of ``chosen`` (None: no handler has a ``when:``), by the choice's identity, else by its handlers'."""
    plans = policy.plans
    same = plans.get(id(chosen))  # (the choice, held so that its id stays its own; its plan)
    if same is not None and same[0] is chosen:
        found: _Plan | None = same[1]
        return found
    ids = tuple(map(id, chosen))  # held with the plan: the ids stay those handlers'
    if ids in plans:
        found = plans[ids][1]
    else:
        whens = [h.handler.when for h in chosen if h.handler.when is not None]
        found = None
        if whens:
            conditions = Conditions(policy, whens)
            pairs = tuple((h, None if h.handler.when is None else conditions.index[id(h.handler.when)]) for h in chosen)
            found = _Plan(pairs, conditions, policy)
    if len(plans) >= PLANS_PER_POLICY:
        plans.clear()
        policy.noted = 0 if found is None else len(found.copies)  # the copies of the plans kept
    plans[ids] = (tuple(chosen), found)
    plans[id(chosen)] = (chosen, found)
    return found


__all__ = ["NOTED_PER_PLAN", "NOTED_PER_POLICY", "PLANS_PER_POLICY", "SessionJudge", "SessionOutcome"]
