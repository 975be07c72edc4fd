"""Pydantic models of session policy: ``hookbus.session`` (facts, counters, budgets) and ``when:``.

A *fact* is a named flag of one session, set by the events its ``setBy`` lists (an event name
and permission rules in Claude Code's syntax), until its ``ttl`` passes or an event of its
``clearedBy`` clears it. A *counter* counts the events its ``count`` lists over a sliding
``window``. A *budget* is a counter with a limit and a verdict. ``when:`` on a matcher group or
a handler makes it run only while the session's state says so. Names of facts and counters
are checked against the definitions when the file loads (:mod:`bus.policy.loading`).
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from bus.hooks.events import EVENTS
from bus.hooks.matching import compile_matcher

#: The counters every session has without defining them (:mod:`bus.session`).
BUILTIN_COUNTERS: Final = ("tool_calls", "failures", "session_age_seconds", "tokens", "cost_usd")
#: What a duration may be written in, and each unit in seconds.
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def duration_seconds(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"1h"``, ``"1d"``, ``"250ms"`` in seconds; ValueError otherwise."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        if re.fullmatch(r"\d+(?:\.\d+)?", text.strip()):
            raise ValueError(f"a duration needs a unit (ms, s, m, h or d): got {text!r}, write e.g. '{text.strip()}s'")
        raise ValueError(f"not a duration: {text!r} (write a number and a unit: 30s, 5m, 1h, 1d)")
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if seconds <= 0:
        raise ValueError(f"a duration must be above 0 (got {text!r})")
    return seconds


def _duration(value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"a duration needs a unit (ms, s, m, h or d): got {value!r}, write e.g. '{value}s'")
    if isinstance(value, str):
        duration_seconds(value)
    return value


#: A duration as a policy writes it: a number and a unit (``30s``, ``5m``, ``1h``, ``1d``).
Duration = Annotated[str, BeforeValidator(_duration)]


def _name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(f"must be 1-64 letters, digits or '_', not starting with a digit (got {value!r})")
    return value


def _event(name: str) -> str:
    if name not in EVENTS:
        raise ValueError(f"unknown event {name!r}")
    return name


Name = Annotated[str, AfterValidator(_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)


class EventRules(_Strict):
    """Events of one kind that set, clear or count: those of ``event`` matching any of ``rules``
    (every one when there are none) and none of ``except``."""

    event: Annotated[str, AfterValidator(_event)]
    rules: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    except_: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list, alias="except")


class FactDef(_Strict):
    """``hookbus.session.facts.<name>``."""

    set_by: Annotated[list[EventRules], Field(min_length=1)] = Field(alias="setBy")
    cleared_by: list[EventRules] = Field(default_factory=list, alias="clearedBy")
    #: How long the fact lasts once set; None: for the session.
    ttl: Duration | None = None
    description: str | None = None


class OnLimit(_Strict):
    """``onLimit`` of a tenant or agent counter: once its count goes above ``above``, ``action``."""

    above: Annotated[int, Field(ge=0)]
    action: Literal["freeze"] = "freeze"
    #: The tools frozen (default: the state-changing tools, as ``hookbus freeze``).
    tools: list[Annotated[str, Field(min_length=1)]] | None = None
    #: How long the freeze lasts; None: until lifted.
    for_: Duration | None = Field(default=None, alias="for")

    @model_validator(mode="after")
    def _tools(self) -> OnLimit:
        for tool in self.tools or ():
            compile_matcher(tool, "PreToolUse")  # ValueError for a matcher that does not compile
        return self


class CounterDef(_Strict):
    """``hookbus.session.counters.<name>``: matching events over a sliding window."""

    count: Annotated[list[EventRules], Field(min_length=1)]
    #: The sliding window; None: the whole session.
    window: Duration | None = None
    #: Whose events are counted together: one session's, one agent's across the tenant, or the
    #: whole tenant's (``per`` is the older spelling).
    scope: Literal["session", "agent", "tenant"] = Field(
        default="session", validation_alias=AliasChoices("scope", "per")
    )
    #: Tenant or agent scope only: count only events decided one of these (none: every decision).
    decisions: list[Literal["allow", "deny", "ask", "defer", "block", "none"]] = Field(default_factory=list)
    #: Tenant or agent scope only: what happens when the count first goes above a limit.
    on_limit: OnLimit | None = Field(default=None, alias="onLimit")
    description: str | None = None

    @model_validator(mode="after")
    def _scoped(self) -> CounterDef:
        if self.scope == "session" and (self.decisions or self.on_limit is not None):
            raise ValueError("'decisions' and 'onLimit' need 'scope: tenant' or 'scope: agent'")
        if self.scope != "session" and self.window is None:
            raise ValueError(f"a counter with 'scope: {self.scope}' needs a 'window' (its count expires with it)")
        return self


class BudgetDef(_Strict):
    """``hookbus.session.budgets.<name>``: an event that would take ``counter`` past ``limit`` gets ``verdict``."""

    counter: Name
    limit: Annotated[int, Field(ge=0)]
    verdict: Literal["deny", "ask"] = "deny"
    reason: str | None = None


class SessionSettings(_Strict):
    """``hookbus.session``: what a session remembers, and for how long."""

    facts: dict[Name, FactDef] = Field(default_factory=dict)
    counters: dict[Name, CounterDef] = Field(default_factory=dict)
    budgets: dict[Name, BudgetDef] = Field(default_factory=dict)
    #: Consecutive failing tool calls after which the next call is denied (the loop gate); 0: off.
    loop_gate: Annotated[int, Field(ge=0)] = Field(default=0, alias="loopGate")
    #: A session's state lives this long after its last event.
    ttl: Duration = "24h"
    #: Sessions with state per tenant (per partition); past it the least recently used is dropped.
    max_sessions: Annotated[int, Field(ge=1)] = Field(default=100_000, alias="maxSessions")

    @property
    def defined(self) -> bool:
        """Whether the policy keeps any state per session."""
        return bool(self.facts or self.counters or self.budgets or self.loop_gate)


class Threshold(_Strict):
    """A comparison of a counter's value: every bound given must hold."""

    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


class When(_Strict):
    """``when:`` of a matcher group or handler: every key given must hold.

    ``facts`` all set, ``anyFacts`` one set, ``notFacts`` none set (never happened, or cleared),
    ``within`` each fact set in its last duration, ``after`` each fact set later than the other
    fact's last setting (or that one never set), ``counters`` each value within its bounds; ``any``
    one of the nested conditions, ``not`` the nested condition does not hold.
    """

    facts: list[Name] = Field(default_factory=list)
    any_facts: list[Name] = Field(default_factory=list, alias="anyFacts")
    not_facts: list[Name] = Field(default_factory=list, alias="notFacts")
    within: dict[Name, Duration] = Field(default_factory=dict)
    after: dict[Name, Name] = Field(default_factory=dict)
    counters: dict[Name, Threshold] = Field(default_factory=dict)
    any: list[When] = Field(default_factory=list)
    not_: When | None = Field(default=None, alias="not")
    all: list[When] = Field(default_factory=list)

    def fact_names(self) -> set[str]:
        """Every fact this condition reads, nested ones included."""
        names = {*self.facts, *self.any_facts, *self.not_facts, *self.within, *self.after, *self.after.values()}
        for nested in (*self.any, *self.all, *((self.not_,) if self.not_ else ())):
            names |= nested.fact_names()
        return names

    def counter_names(self) -> set[str]:
        """Every counter this condition reads, nested ones included."""
        names = set(self.counters)
        for nested in (*self.any, *self.all, *((self.not_,) if self.not_ else ())):
            names |= nested.counter_names()
        return names


def both(first: When | None, second: When | None) -> When | None:
    """The condition that holds when both hold (a group's ``when`` and its handler's)."""
    if first is None or second is None:
        return first or second
    return When(all=[first, second])


__all__ = [
    "BUILTIN_COUNTERS",
    "BudgetDef",
    "CounterDef",
    "Duration",
    "EventRules",
    "FactDef",
    "OnLimit",
    "SessionSettings",
    "Threshold",
    "When",
    "both",
    "duration_seconds",
]
