"""From the handlers' answers to the event's decision: a pure function, no Redis, no clock.

The engine runs the handlers a policy selects (the only part that waits on anything) and
hands their results, in policy order, to :func:`judge`. It returns the merged decision, what
``shadow`` handlers would have decided, whether a failure let the action through (fail
open), and the counts to add to the metrics, as data: the engine applies them in one step,
after the session rules that need Redis (the Stop guard, pending context), and
:func:`deciders` names the handlers that made the final decision. The same inputs always
give the same :class:`Judgement`, so it is tested on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from bus.hooks.decisions import Decision, FailOpenReason
from bus.hooks.merge import MergedDecision, merge_results
from bus.hooks.results import HandlerResult, Outcome


@dataclasses.dataclass(frozen=True, slots=True)
class Count:
    """One increment of a metric, by its attribute on :class:`bus.runtime.metrics.Metrics`."""

    metric: str
    labels: tuple[str, ...]


@dataclasses.dataclass(slots=True)
class Judgement:
    """What the handlers' answers decide about one event."""

    merged: MergedDecision
    #: The enforced results (none when the whole policy is in shadow mode).
    enforced: list[HandlerResult]
    #: What the ``shadow`` handlers would have decided (logged, never enforced).
    shadow: list[dict[str, Any]]
    fail_open: FailOpenReason | None
    counts: list[Count]


def judge(
    event: str,
    results: Sequence[HandlerResult],
    whole_shadow: bool = False,
) -> Judgement:
    """Merge ``results`` (in policy order) into the event's decision; ``whole_shadow``: the
    policy's ``shadow: true`` (every handler is logged, none enforced)."""
    if not whole_shadow:
        for result in results:
            if result.outcome is not Outcome.OK or result.output or result.text or result.shadow:
                break
        else:  # nobody said anything (most tool calls a policy lets through): what the rest gives, sooner
            return Judgement(MergedDecision({}, Decision.NONE, None), list(results), [], None, [])
    counts: list[Count] = []
    shadow: list[dict[str, Any]] = []
    shadow_results = [r for r in results if r.shadow or whole_shadow]
    if shadow_results:
        would = merge_results(event, [dataclasses.replace(r, shadow=False) for r in shadow_results])
        counts.append(Count("shadow_decisions", (event, would.decision)))
        shadow.append(
            {"decision": would.decision, "output": would.output, "handlers": [r.handler_id for r in shadow_results]}
        )
    enforced = [] if whole_shadow else [r for r in results if not r.shadow]
    merged = merge_results(event, enforced)
    fail_open: FailOpenReason | None = None
    for result in results:
        if result.outcome is Outcome.TIMEOUT:
            counts.append(Count("timeouts", ("handler",)))
    for result in enforced:
        if result.failed and result.fail_closed:
            counts.append(Count("fail_closed", (event, result.handler_type)))
        elif result.failed and merged.decision in (Decision.NONE, Decision.ALLOW):
            # Counted only when the failure may have let the action through.
            timed_out = result.outcome is Outcome.TIMEOUT
            fail_open = FailOpenReason.HOOK_TIMEOUT if timed_out else FailOpenReason.HOOK_ERROR
    return Judgement(merged, enforced, shadow, fail_open, counts)


def deciders(event: str, results: Sequence[HandlerResult], decision: str) -> list[str]:
    """The ids of the handlers among ``results`` (the enforced ones) whose own answer is ``decision``.

    Every handler that voted the winning decision counts (two rules denying the same call
    both decided it); a handler that failed open decided nothing.
    """
    if decision == Decision.NONE:
        return []
    # An OK answer with nothing in it takes no part in the merge: with one answer that says
    # something, the merged decision is its own; only several cost a merge each.
    voters = [r for r in results if r.outcome is not Outcome.OK or r.output or r.text]
    if len(voters) == 1:
        return [voters[0].handler_id]
    return [r.handler_id for r in voters if merge_results(event, [r]).decision == decision]


__all__ = ["Count", "Judgement", "deciders", "judge"]
