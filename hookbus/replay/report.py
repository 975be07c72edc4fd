"""What a policy replay found, added up: changed decisions by kind, the rules responsible, examples.

:class:`ReplayReport` takes one :class:`Replayed` per recorded event and renders the result
as text (for people) or JSON (for the console and scripts); see :mod:`hookbus.replay.run`.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any

from bus.hooks.decisions import Decision
from hookbus.replay.judging import Unjudged

#: Changed events kept as examples, per kind of change.
EXAMPLES_PER_KIND = 3
TOP_RULES = 10


def reason_of(output: dict[str, Any]) -> str:
    """The first line of the reason a hook output gives, or ""."""
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    decision = specific.get("decision")
    message = decision.get("message") if isinstance(decision, dict) else None
    for value in (
        specific.get("permissionDecisionReason"),
        message,
        output.get("reason"),
        output.get("stopReason"),
        output.get("systemMessage"),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip().splitlines()[0][:300]
    return ""


def input_summary(hook_input: dict[str, Any], limit: int = 160) -> str:
    """The part of a hook input that says what was attempted (a command, a path, a prompt)."""
    tool_input = hook_input.get("tool_input")
    if isinstance(tool_input, dict):
        for key in ("command", "file_path", "path", "url", "pattern", "query"):
            if isinstance(tool_input.get(key), str):
                return str(tool_input[key])[:limit]
        text = str(tool_input)
    elif isinstance(hook_input.get("prompt"), str):
        text = hook_input["prompt"]
    else:
        text = ""
    return text[:limit]


@dataclasses.dataclass(slots=True)
class Replayed:
    """One recorded event and what the candidate decided on it."""

    log_id: str
    event_id: str
    event: str
    tenant: str
    session_id: str
    tool_name: str
    received_ms: int
    recorded: str
    recorded_reason: str
    candidate: str
    candidate_reason: str
    #: What made the difference: the candidate's deciding handlers, or what decided before.
    responsible: list[str]
    #: Handlers the candidate selected but did not run (their answer counted as no opinion).
    not_replayed: list[str]
    masked: list[str]
    summary: str
    #: The session's facts under the candidate once this event was decided (``hookbus.session``).
    facts: list[str] = dataclasses.field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.recorded != self.candidate

    @property
    def redaction_flag(self) -> bool:
        """The input had masked fields and its outcome hinged on the policy: the real input may decide otherwise."""
        return bool(self.masked) and (self.changed or self.candidate != Decision.NONE)

    def to_json(self) -> dict[str, Any]:
        return {
            "log_id": self.log_id,
            "id": self.event_id,
            "event": self.event,
            "tenant": self.tenant,
            "session_id": self.session_id,
            "tool_name": self.tool_name or None,
            "received_ms": self.received_ms,
            "recorded": self.recorded,
            "recorded_reason": self.recorded_reason,
            "candidate": self.candidate,
            "candidate_reason": self.candidate_reason,
            "responsible": self.responsible,
            "not_replayed": self.not_replayed,
            "masked": self.masked,
            "input": self.summary,
            "facts": self.facts,
            "redaction_may_matter": self.redaction_flag,
        }


@dataclasses.dataclass
class ReplayReport:
    """The sums of one replay."""

    revision: str
    sources: list[str]
    since_ms: int | None
    until_ms: int | None
    tenants: list[str]
    run_handlers: bool
    read: int = 0
    skipped: int = 0
    #: Second records of an event already read (a reply lost as Redis stopped, logged again as
    #: fail-open): replayed once, by its first record.
    repeated: int = 0
    truncated: bool = False
    #: Records whose input cannot be judged (too long, too deep, not split in time).
    unjudged: Unjudged = dataclasses.field(default_factory=Unjudged)
    #: The time budget, and why the replay stopped before the end of the window (``partial``), if it did.
    budget_s: float | None = None
    stopped: str | None = None
    replayed: int = 0
    changed: int = 0
    kinds: collections.Counter[tuple[str, str]] = dataclasses.field(default_factory=collections.Counter)
    responsible: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    examples: dict[tuple[str, str], list[Replayed]] = dataclasses.field(default_factory=dict)
    not_replayed_handlers: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    not_replayed_events: int = 0
    changed_with_not_replayed: int = 0
    redaction_flagged: list[Replayed] = dataclasses.field(default_factory=list)
    #: Sessions the candidate stops where the log let them go on, each with the first such event.
    stopped_sessions: dict[tuple[str, str], Replayed] = dataclasses.field(default_factory=dict)

    @property
    def partial(self) -> bool:
        return self.stopped is not None

    def add(self, item: Replayed) -> None:
        self.replayed += 1
        if item.not_replayed:
            self.not_replayed_events += 1
            self.not_replayed_handlers.update(name.split(" ", 1)[0] for name in item.not_replayed)
        if item.redaction_flag:
            self.redaction_flagged.append(item)
        if not item.changed:
            return
        self.changed += 1
        if item.facts and item.candidate in _STOPS and item.recorded not in _STOPS:
            self.stopped_sessions.setdefault((item.tenant, item.session_id), item)
        kind = (item.recorded, item.candidate)
        self.kinds[kind] += 1
        self.responsible.update(item.responsible or ["(nothing decided)"])
        if item.not_replayed:
            self.changed_with_not_replayed += 1
        kept = self.examples.setdefault(kind, [])
        if len(kept) < EXAMPLES_PER_KIND:
            kept.append(item)

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": {"revision": self.revision, "sources": self.sources},
            "window": {"since_ms": self.since_ms, "until_ms": self.until_ms, "tenants": self.tenants or None},
            "run_handlers": self.run_handlers,
            "records": self.read,
            "replayed": self.replayed,
            "skipped": self.skipped,
            "repeated": self.repeated,
            "truncated": self.truncated,
            "partial": self.partial,
            "stopped": self.stopped,
            "budget_s": self.budget_s,
            "unjudged": self.unjudged.to_json(),
            "changed": self.changed,
            "unchanged": self.replayed - self.changed,
            "changes": [
                {"from": before, "to": after, "count": count} for (before, after), count in self.kinds.most_common()
            ],
            "top_rules": [{"rule": rule, "count": count} for rule, count in self.responsible.most_common(TOP_RULES)],
            "examples": [item.to_json() for kind, _ in self.kinds.most_common() for item in self.examples[kind]],
            "not_replayed": {
                "handlers": dict(self.not_replayed_handlers.most_common()),
                "events": self.not_replayed_events,
                "changed": self.changed_with_not_replayed,
            },
            "sessions_stopped": {
                "count": len(self.stopped_sessions),
                "first": [item.to_json() for item in list(self.stopped_sessions.values())[:20]],
            },
            "redacted": {
                "flagged": len(self.redaction_flagged),
                "events": [item.to_json() for item in self.redaction_flagged[:20]],
            },
        }

    def to_text(self) -> str:
        window = f"{_stamp(self.since_ms) if self.since_ms else 'the start of the log'} .. " + (
            _stamp(self.until_ms) if self.until_ms else "now"
        )
        tenants = ", ".join(self.tenants) if self.tenants else "all tenants"
        lines = [
            f"replayed {self.replayed} recorded events ({window}, {tenants}) through the candidate "
            f"(revision {self.revision}: {', '.join(self.sources)})"
        ]
        if self.skipped:
            lines.append(f"skipped {self.skipped} log entries that are not hook inputs hookbus can read")
        if self.repeated:
            lines.append(f"replayed {self.repeated} events logged twice (a reply lost, then fail-open) once")
        if self.truncated:
            lines.append(f"stopped after {self.read} records (--limit): narrow the window to see the rest")
        if self.stopped:
            lines.append(f"partial: {self.stopped}")
        if self.unjudged.events:
            lines.append(self.unjudged.to_text())
        lines.append(f"changed: {self.changed} of {self.replayed}" + ("" if self.changed else " (no decision changes)"))
        width = max((len(f"{a} -> {b}") for a, b in self.kinds), default=0)
        for (before, after), count in self.kinds.most_common():
            lines.append(f"  {f'{before} -> {after}':<{width}}  {count}")
        if self.responsible:
            lines.append("top rules responsible:")
            lines += [f"  {count:>5}  {rule}" for rule, count in self.responsible.most_common(TOP_RULES)]
        if self.examples:
            lines.append("examples:")
            for kind, _ in self.kinds.most_common():
                for item in self.examples[kind]:
                    lines.append(
                        f"  {item.recorded} -> {item.candidate}  {_stamp(item.received_ms)} "
                        f"{item.tenant}/{item.session_id[:12]} {item.event}"
                        f"{f'({item.tool_name})' if item.tool_name else ''} {item.summary!r}"
                    )
                    lines.append(f"      now: {item.candidate_reason or '-'}; was: {item.recorded_reason or '-'}")
        if self.stopped_sessions:
            lines.append(
                f"sessions a session rule would have stopped: {len(self.stopped_sessions)} (first stop of each)"
            )
            for item in list(self.stopped_sessions.values())[: EXAMPLES_PER_KIND * 2]:
                lines.append(
                    f"  {item.tenant}/{item.session_id[:12]} {_stamp(item.received_ms)} {item.event}"
                    f"{f'({item.tool_name})' if item.tool_name else ''} -> {item.candidate} "
                    f"[facts: {', '.join(item.facts)}] {item.summary!r}"
                )
        if self.not_replayed_handlers:
            kinds = ", ".join(f"{n} {t}" for t, n in self.not_replayed_handlers.most_common())
            lines.append(
                f"not replayed: {kinds} handler runs on {self.not_replayed_events} events counted as no "
                f"opinion (--run-handlers runs them in a sandbox); {self.changed_with_not_replayed} of the "
                "changed decisions involve one"
            )
        if self.redaction_flagged:
            ids = ", ".join(item.event_id for item in self.redaction_flagged[:5])
            lines.append(
                f"redacted inputs: {len(self.redaction_flagged)} events had masked fields and changed or "
                f"matched a rule: the unredacted input may decide differently ({ids}"
                f"{', ...' if len(self.redaction_flagged) > 5 else ''})"
            )
        return "\n".join(lines)


#: Decisions that stop a call or the agent.
_STOPS = frozenset({"deny", "block", "ask"})


def _stamp(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


__all__ = ["ReplayReport", "Replayed", "input_summary", "reason_of"]
