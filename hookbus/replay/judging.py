"""Logged inputs judged again as a live decision judges them, within a time budget per report.

Replay and coverage evaluate the decision log's inputs again, and an input there is whatever an
agent sent, up to the gateway's body limit. Each one gets what a live decision gets:

* the policy's ``hookbus.limits``: a command over ``commandBytes``, or a path or URL over
  ``stringBytes``, *cannot be judged* (deny and ask rules meet it, allow rules never do), and an
  input nested deeper than ``nestingDepth`` is not evaluated at all (the gateway does not hand
  it to the policy either);
* the dispatcher's split of a long command, in a worker thread within the same time budget
  (:func:`workers.engine.judging.judge_command`): a command it cannot split in time cannot be
  judged either, and every rule of the input then sees that judgement (:meth:`Logged.judged`)
  instead of splitting it again.

A report as a whole runs within a :class:`Budget`: past it, it reads no further records, and it
says it is partial and how many records it evaluated.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import orjson

from bus.hooks.events import event_spec
from bus.policy.schema import PlatformSettings
from bus.rules.bashsplit import Prepared
from bus.rules.limits import depth_over
from bus.stream.protocol import LogRecord
from workers.engine.judging import judge_command, judged

#: The inputs that cannot be judged that a report lists (it counts them all).
UNJUDGED_EXAMPLES = 10


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long one report may evaluate records; ``budget_s=None``: no limit (the command line's default)."""

    budget_s: float | None
    deadline: float

    @classmethod
    def start(cls, budget_s: float | None) -> Budget:
        """A budget of ``budget_s`` seconds from now."""
        return cls(budget_s, math.inf if budget_s is None else time.monotonic() + budget_s)

    def spent(self) -> bool:
        """Whether the budget has run out: the report stops before its next record."""
        return time.monotonic() >= self.deadline

    def stopped(self, evaluated: int) -> str:
        """Why a report that ran out of budget is partial, for people."""
        return (
            f"the time budget of {self.budget_s:g} s ran out after {evaluated} records: "
            "the counts are of those records only; narrow the window (since/until, tenant)"
        )


@dataclasses.dataclass(frozen=True)
class Logged:
    """One logged input, read and judged as a live decision reads and judges it."""

    hook_input: dict[str, Any]
    #: Its shell command's judgement when it is long (its commands, or why it cannot be judged).
    found: Prepared | None
    settings: PlatformSettings
    #: Why the input, or its command, cannot be judged; ``None`` when it can.
    unjudged: str | None = None
    #: False when the input is not evaluated at all (nested past ``nestingDepth``).
    evaluable: bool = True

    def judged(self) -> judged:
        """The context to evaluate the input in: its command's judgement and the policy's limits."""
        return judged(self.found, self.settings.limits)


async def judge_logged(record: LogRecord, settings: PlatformSettings) -> Logged | None:
    """The record's input judged under ``settings`` (a policy's); ``None`` when it is not a JSON object."""
    try:
        hook_input = orjson.loads(record.payload)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(hook_input, dict):
        return None
    limits = settings.limits
    if (depth := depth_over(hook_input, limits.nesting_depth)) is not None:
        why = (
            f"the hook input is nested {depth} deep, over the limit of {limits.nesting_depth} "
            "(hookbus.limits.nestingDepth)"
        )
        return Logged({}, None, settings, why, evaluable=False)
    # The split's budget is the one a live event gets when it arrives.
    remaining_s = settings.deadline_for(record.event) if event_spec(record.event).blocking else math.inf
    found = await judge_command(hook_input, limits, remaining_s)
    unjudged = next((judgement for judgement in (found or {}).values() if isinstance(judgement, str)), None)
    return Logged(hook_input, found, settings, unjudged)


@dataclasses.dataclass
class Unjudged:
    """The records of a report whose input cannot be judged: all counted, the first few listed."""

    events: int = 0
    examples: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def add(self, log_id: str, record: LogRecord, reason: str) -> None:
        self.events += 1
        if len(self.examples) < UNJUDGED_EXAMPLES:
            self.examples.append(
                {
                    "log_id": log_id,
                    "id": record.event_id,
                    "event": record.event,
                    "tenant": record.tenant,
                    "tool_name": record.tool_name or None,
                    "reason": reason,
                }
            )

    def to_json(self) -> dict[str, Any]:
        return {"events": self.events, "examples": self.examples}

    def to_text(self) -> str:
        first = self.examples[0]["reason"] if self.examples else ""
        return (
            f"{self.events} records cannot be judged (as live: a command too long meets the deny and ask "
            f"rules, an input nested too deep is not evaluated), e.g. {first}"
        )


__all__ = ["UNJUDGED_EXAMPLES", "Budget", "Logged", "Unjudged", "judge_logged"]
