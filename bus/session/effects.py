"""What one event changes in its session's state, and what the session itself decides.

:func:`effects` gives the operations the settle script applies (:data:`bus.session.script.APPLY_LUA`),
one line each: ``S field`` sets a fact (to the script's clock), ``D field`` clears one, ``I field``
adds one to a count, ``A field n`` adds ``n`` (the tokens an event says were spent,
:mod:`bus.session.usage`), ``M field n`` raises a count to ``n`` (a session's totals an event
reports), ``Z field`` sets one to 0, ``R field bucket_ms`` adds one to a windowed
counter's current bucket. A ``PreToolUse`` changes the state only when its call goes ahead (any
decision but deny): a denied call did not happen. ``PostToolUse`` says the call ran and
succeeded, ``PostToolUseFailure`` that it failed (the loop gate counts those in a row).

:func:`verdicts` are the session's own answers to a ``PreToolUse``: a budget the call would
overrun, and the loop gate; each names what it counted, for the model to read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from bus.hooks.decisions import Decision
from bus.hooks.results import HandlerResult, Outcome
from bus.policy.sessionschema import BudgetDef
from bus.session.definitions import (
    BUCKETS,
    CALLS_FIELD,
    COST_FIELD,
    FAILURES_FIELD,
    TOKENS_FIELD,
    Matched,
    SessionPolicy,
)
from bus.session.state import SessionView
from bus.session.usage import session_totals, tokens_spent

#: Decisions after which a ``PreToolUse`` call does not run.
STOPPED: Final = frozenset({Decision.DENY, Decision.BLOCK})
#: Built-in counters that grow by what events report, not by the calls a budget stops: a budget
#: on one stops every ``PreToolUse`` once the count has reached its limit.
_MEASURED: Final = frozenset({"tokens", "cost_usd"})
#: Sets of counters counted whose budgets are kept per policy (past it, they start again).
BUDGET_SETS_KEPT: Final = 1024
#: The handler id of the session's own answers in records and metrics.
BUDGET_HANDLER: Final = "session:budget:"
LOOP_GATE_HANDLER: Final = "session:loopGate"


def goes_ahead(event: str, decision: str) -> bool:
    """Whether an ``event`` answered ``decision`` happened (a denied PreToolUse did not)."""
    return not (event == "PreToolUse" and decision in STOPPED)


def counted(policy: SessionPolicy, event: str, matched: Matched) -> list[str]:
    """The names of the counters ``event`` adds one to (built-ins included)."""
    names = list(matched.count)
    if event == "PreToolUse":
        names.append("tool_calls")
    return names


def effects(
    policy: SessionPolicy, event: str, hook_input: Mapping[str, Any], decision: str, matched: Matched | None = None
) -> list[str]:
    """The operations ``event``, answered ``decision``, applies to its session's state (``matched``:
    what its triggers matched, if known)."""
    if not policy.defined:
        return []
    if event == "PreToolUse":  # as goes_ahead(), inline: once per event
        if decision in STOPPED:
            return []
        if matched is not None and matched.pre_ops is not None:
            return list(matched.pre_ops)  # what follows, kept: a PreToolUse reports no tokens nor totals
    ops: list[str] = []
    if event in policy.events:
        matched = matched or policy.matched(event, hook_input)
        positions = policy.fact_positions
        for name in sorted({*matched.set, *matched.clear} & positions.keys(), key=positions.__getitem__):
            ops.append(f"{'S' if name in matched.set else 'D'} {policy.facts[name].field}")
        positions = policy.counter_positions
        for name in sorted(matched.count.keys() & positions.keys(), key=positions.__getitem__):
            counter = policy.counters[name]
            ops.append(f"I {counter.field}" if counter.bucket_ms is None else f"R {counter.field} {counter.bucket_ms}")
    if event == "PreToolUse":
        ops.append(f"I {CALLS_FIELD}")
    elif event == "PostToolUse":
        ops.append(f"Z {FAILURES_FIELD}")
    elif event == "PostToolUseFailure":
        ops.append(f"I {FAILURES_FIELD}")
    if (tokens := tokens_spent(event, hook_input)) > 0:
        ops.append(f"A {TOKENS_FIELD} {tokens}")
    elif (totals := session_totals(event, hook_input)) is not None:
        ops += [f"M {field} {n}" for field, n in zip((TOKENS_FIELD, COST_FIELD), totals, strict=True) if n > 0]
    if event == "PreToolUse" and matched is not None:
        matched.pre_ops, matched.pre_timed = tuple(ops), timed(ops)
        counted_fields = [op[2:] for op in ops if op.startswith("I ")]
        if len(counted_fields) == len(ops) == len(set(counted_fields)):  # it only counts, one field each
            matched.pre_counts = tuple(counted_fields)
            on = [name for field in counted_fields for name in policy.budgets_by_field.get(field, ())]
            if all(name in policy.budget_count_field for name in on):  # each a count in one field
                matched.pre_budgets = tuple((n, policy.budgets[n].limit, policy.budget_count_field[n]) for n in on)
    return ops


def timed(ops: Sequence[str]) -> bool:
    """Whether what ``ops`` write depends on when they are applied (a fact set or cleared, a window's bucket)."""
    return any(op[0] in "SDR" for op in ops)


def verdicts(view: SessionView, event: str, matched: Matched) -> list[HandlerResult]:
    """The session's own answers to ``event`` (``matched``: what its triggers matched): budgets it
    would overrun, the loop gate."""
    policy = view.policy
    if event != "PreToolUse" or not policy.decides:
        return []
    found: list[HandlerResult] = []
    fields = view.state.fields
    raw = fields.get(FAILURES_FIELD) if policy.loop_gate else None  # view.counter("failures"), inline
    if raw and raw.isdecimal() and (failures := int(raw)) >= policy.loop_gate:
        text = (
            f"hookbus: the last {failures} tool calls of this session failed in a row (loop gate "
            f"{policy.loop_gate}). Stop retrying: tell the user what fails and ask how to go on."
        )
        found.append(_answer(LOOP_GATE_HANDLER, "deny", text))
    if policy.budgets:
        on = matched.checked  # kept with the match, and per set of counters counted
        if on is None:
            on = matched.checked = _checked(policy, event, matched)
        for name, budget, measured, one in on:
            if one is not None:  # a count in one field: view.counter(), inline
                raw = fields.get(one)
                used: float = int(raw) if raw and raw.isdecimal() else 0
            else:
                used = view.counter(budget.counter)
            if (used >= budget.limit) if measured else (used + 1 > budget.limit):
                why = budget.reason or f"hookbus: budget {name!r} is used up"
                text = f"{why} ({budget.counter}: {used:g} of {budget.limit})"
                found.append(_answer(BUDGET_HANDLER + name, budget.verdict, text))
    return found


def _checked(policy: SessionPolicy, event: str, matched: Matched) -> list[tuple[str, BudgetDef, bool, str | None]]:
    """The budgets a PreToolUse that matched ``matched`` checks (kept per set of counters counted):
    each name, definition, whether its counter is measured, and the field it reads when its counter
    is a count in one field."""
    on = policy.kept_budgets_on.get(key := tuple(matched.count))
    if on is None:
        counters = dict.fromkeys([*counted(policy, event, matched), *_MEASURED])  # measured: checked on every call
        names = [name for _, name in sorted(item for c in counters for item in policy.budgets_of.get(c, ()))]
        single, budgets = policy.budget_count_field, policy.budgets
        on = [(name, budgets[name], budgets[name].counter in _MEASURED, single.get(name)) for name in names]
        if len(policy.kept_budgets_on) >= BUDGET_SETS_KEPT:
            policy.kept_budgets_on.clear()
        policy.kept_budgets_on[key] = on
    return on


def handed(view: SessionView) -> dict[str, Any]:
    """What handlers are given of the session (``hookbus.session`` in their input): the facts set
    now and, per budget, its counter, limit, what was used and what is left."""
    budgets = {}
    for name, budget in view.policy.budgets.items():
        used = view.counter(budget.counter)
        budgets[name] = {
            "counter": budget.counter,
            "limit": budget.limit,
            "used": used,
            "remaining": max(0.0, budget.limit - used),
        }
    return {"facts": view.facts(), "budgets": budgets}


def _answer(handler_id: str, verdict: str, text: str) -> HandlerResult:
    output = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": verdict,
            "permissionDecisionReason": text,
        }
    }
    return HandlerResult(
        Outcome.OK, output=output, handler_type="session", handler_id=handler_id, decided=(verdict, text)
    )


def facts_note(facts: Sequence[str]) -> str:
    """What names ``facts`` in the reason of an answer they led to (:func:`bus.hooks.results.with_note`)."""
    return f" [session facts: {', '.join(facts)}]" if facts else ""


__all__ = [
    "BUCKETS",
    "BUDGET_HANDLER",
    "BUDGET_SETS_KEPT",
    "LOOP_GATE_HANDLER",
    "STOPPED",
    "counted",
    "effects",
    "facts_note",
    "goes_ahead",
    "handed",
    "timed",
    "verdicts",
]
