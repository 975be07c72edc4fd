"""Policy test files: what a policy must decide, case by case (``hookbus policy test``).

A test file is YAML or JSON and sits next to its policy (``policy_test.yaml`` tests
``policy.yaml`` unless it names its policy with ``policy:``). Each case is one event: an event
name, a tool and its input (or a whole hook input, in an agent's own format when ``agent`` names
its dialect), the session state it meets (``session``, and the events before it: ``history``,
each decided by the same policy, in order), the answers of handlers that are not
run in a test (``stubs``), and what must come back (``expect``)::

    cases:
      - name: a force push is denied
        tool: Bash
        input: {command: "git push --force origin main"}
        expect: {decision: deny, reason: "dangerous-commands"}

The file is validated here, at the edge, and every problem is reported with its line.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bus.dialects import DIALECTS
from bus.errors import PolicyError, PolicyProblem
from bus.hooks.events import EVENTS
from bus.policy.schema import Loc, human_errors, suggest

#: How a test file's name ends; what is left of the name before it names its policy.
TEST_SUFFIXES = ("_test.yaml", "_test.yml", "_test.json")
POLICY_SUFFIXES = (".yaml", ".yml", ".json")
#: The decisions a case may expect (``block``: a Stop, a prompt, a PostToolUse turned back).
ExpectedDecision = Literal["deny", "ask", "allow", "block", "none"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Stub(_Model):
    """The answer one handler gives in a case instead of running: an exit code, stdout, stderr.

    ``handler`` names it: its id (or the first 8 or more characters of it), or its ``command``,
    ``url``, ``function``, ``server/tool`` or ``prompt``. The answer is read exactly as a
    command hook's is (exit 0 with JSON on stdout, exit 2 with the reason on stderr).
    """

    handler: str = Field(min_length=1)
    exit_code: int = Field(default=0, alias="exitCode")
    #: Text, or a JSON object (written as JSON).
    stdout: str | dict[str, Any] = ""
    stderr: str = ""

    def stdout_text(self) -> str:
        return self.stdout if isinstance(self.stdout, str) else json.dumps(self.stdout)


class Session(_Model):
    """What the session has seen before the case's event."""

    id: str = Field(default="policy-test", min_length=1)
    #: Consecutive blocks of Stop/SubagentStop already counted by the Stop guard.
    stop_blocks: int = Field(default=0, ge=0, alias="stopBlocks")
    #: ``once`` handlers that already ran in this session (named like a stub's ``handler``).
    once_fired: list[str] = Field(default_factory=list, alias="onceFired")


class Prior(_Model):
    """One event the session saw before the case's own (``history``), decided by the same policy."""

    event: str = "PreToolUse"
    tool: str | None = None
    input: dict[str, Any] | None = None

    @field_validator("event")
    @classmethod
    def _known_event(cls, event: str) -> str:
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}{suggest(event, EVENTS)}")
        return event


class Expect(_Model):
    """What must come back; a field left out is not checked."""

    decision: ExpectedDecision | None = None
    #: A text the decision's reason contains.
    reason: str | None = None
    #: The ``updatedInput`` the answer carries, exactly.
    updated_input: dict[str, Any] | None = Field(default=None, alias="updatedInput")
    #: A text the added context (``additionalContext``) contains.
    context: str | None = None
    #: The session's facts once the event is decided (``hookbus.session``), exactly (any order).
    facts: list[str] | None = None


class Case(_Model):
    """One event and what the policy must answer to it."""

    name: str = Field(min_length=1)
    #: The event (default ``PreToolUse``, or a ``hookInput``'s own).
    event: str = "PreToolUse"
    tool: str | None = None
    #: The tool's input (tool events), or further input fields (other events).
    input: dict[str, Any] | None = None
    #: A whole hook input instead of ``tool``/``input`` (the agent's own format when ``agent`` is set).
    hook_input: dict[str, Any] | None = Field(default=None, alias="hookInput")
    #: The agent whose dialect sends the event (``claude`` by default).
    agent: str | None = None
    #: The working directory the agent reports (path rules like ``Read(src/**)`` are relative to it).
    cwd: str = "/policy-test"
    tenant: str = "policy-test"
    session: Session = Field(default_factory=Session)
    #: Events of the session before this one, in order (``hookbus.session`` facts and counters).
    history: list[Prior] = Field(default_factory=list)
    stubs: list[Stub] = Field(default_factory=list)
    expect: Expect

    @field_validator("event")
    @classmethod
    def _known_event(cls, event: str) -> str:
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}{suggest(event, EVENTS)}")
        return event

    @field_validator("agent")
    @classmethod
    def _known_agent(cls, agent: str | None) -> str | None:
        if agent is not None and agent not in DIALECTS:
            known = ", ".join(DIALECTS)
            raise ValueError(f"unknown agent {agent!r}{suggest(agent, DIALECTS)} (known agents: {known})")
        return agent

    @model_validator(mode="after")
    def _one_input(self) -> Case:
        if self.hook_input is not None and (self.tool is not None or self.input is not None):
            raise ValueError("give either hookInput or tool/input, not both")
        return self

    def prior_input(self, prior: Prior) -> dict[str, Any]:
        """The hook input (Claude Code's format) of one event of :attr:`history`."""
        return self._made_input(prior.event, prior.tool, prior.input)

    def _made_input(self, event: str, tool: str | None, given: dict[str, Any] | None) -> dict[str, Any]:
        hook_input: dict[str, Any] = {
            "hook_event_name": event,
            "session_id": self.session.id,
            "cwd": self.cwd,
            "transcript_path": "",
        }
        if tool is not None:
            hook_input["tool_name"] = tool
            hook_input["tool_input"] = dict(given or {})
        else:
            hook_input.update(given or {})
        return hook_input

    def canonical_input(self) -> tuple[dict[str, Any], str, str]:
        """The hook input in Claude Code's format, the dialect it came in (``""``: Claude Code's
        own) and its event: a ``hookInput``'s own (translated) event unless ``event`` is given."""
        dialect = "" if self.agent in (None, "claude") else str(self.agent)
        if self.hook_input is not None:
            given = dict(self.hook_input)
            if dialect:
                given = DIALECTS[dialect].to_canonical(given)
            named = given.get("hook_event_name")
            event = named if "event" not in self.model_fields_set and named in EVENTS else self.event
            given.setdefault("hook_event_name", event)
            given.setdefault("session_id", self.session.id)
            return given, dialect, str(event)
        return self._made_input(self.event, self.tool, self.input), dialect, self.event


class CaseFile(_Model):
    """A whole test file: the policy it tests (paths relative to the file) and its cases."""

    policy: list[str] | str | None = None
    cases: list[Case] = Field(min_length=1)


@dataclasses.dataclass(frozen=True)
class LoadedCase:
    """A case and where it is written."""

    case: Case
    source: str
    line: int | None


@dataclasses.dataclass(frozen=True)
class Suite:
    """One loaded test file."""

    source: str
    #: The policy files it tests, in layering order (``--policy`` replaces them).
    policy_paths: tuple[str, ...]
    cases: tuple[LoadedCase, ...]


def line_map(text: str) -> dict[Loc, int]:
    """Each path of a YAML (or JSON) document mapped to its 1-based line; empty if it does not compose."""
    try:
        node = yaml.compose(text.replace("\t", " "), Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[Loc, int] = {}
    stack: list[tuple[Any, Loc]] = [(node, ())]
    while stack:
        current, loc = stack.pop()
        if current is None:
            continue
        lines.setdefault(loc, current.start_mark.line + 1)
        if isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    lines[(*loc, key.value)] = key.start_mark.line + 1
                    stack.append((value, (*loc, key.value)))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, (*loc, i)) for i, item in enumerate(current.value))
    return lines


def line_of(lines: dict[Loc, int], loc: Loc) -> int | None:
    """The line of ``loc``, or of its nearest parent that has one."""
    for n in range(len(loc), -1, -1):
        if (found := lines.get(loc[:n])) is not None:
            return found
    return None


def _render(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def default_policy(test_path: Path) -> Path | None:
    """The policy a test file tests when it names none: its name without ``_test``, next to it."""
    name = test_path.name
    for suffix in TEST_SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            for ext in POLICY_SUFFIXES:
                if (candidate := test_path.with_name(stem + ext)).is_file():
                    return candidate
    return None


def load_suite(path: str | Path, policy_override: Sequence[str] = ()) -> Suite:
    """Read and validate one test file; raises PolicyError with every problem and its line."""
    source, path = str(path), Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError([PolicyProblem(source, None, "", f"cannot read: {exc}")]) from exc
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = getattr(exc, "lineno", None) or (None if mark is None else mark.line + 1)
        what = path.suffix.lstrip(".").upper() or "YAML"
        raise PolicyError([PolicyProblem(source, line, "", f"not valid {what}: {exc}")]) from exc
    lines = line_map(text)
    try:
        parsed = CaseFile.model_validate(data if data is not None else {}, by_alias=True, by_name=True)
    except ValidationError as exc:
        problems = [
            PolicyProblem(source, line_of(lines, at), _render(where), message)
            for where, at, message in human_errors(exc)
        ]
        raise PolicyError(problems) from exc
    if policy_override:
        policy_paths = tuple(policy_override)
    elif parsed.policy is not None:
        named = [parsed.policy] if isinstance(parsed.policy, str) else parsed.policy
        policy_paths = tuple(str(path.parent / name) for name in named)
    elif (found := default_policy(path)) is not None:
        policy_paths = (str(found),)
    else:
        message = (
            "names no policy: add 'policy: FILE', name the file after its policy (policy_test.yaml), or pass --policy"
        )
        raise PolicyError([PolicyProblem(source, None, "", message)])
    cases = tuple(LoadedCase(case, source, line_of(lines, ("cases", i))) for i, case in enumerate(parsed.cases))
    return Suite(source, policy_paths, cases)


def is_test_file(path: Path) -> bool:
    return path.name.endswith(TEST_SUFFIXES)


def discover(paths: Sequence[str]) -> tuple[list[Path], list[Path]]:
    """The test files under ``paths``, and the policy files among them that no test file tests.

    A folder is searched recursively (hidden folders, ``node_modules`` and ``__pycache__`` left
    out): its test files, and its policies (``*.yaml``/``*.json`` with a top-level ``hooks`` key).
    A file is a test file, or a policy whose test file is looked for next to it.
    """
    tests: list[Path] = []
    candidates: list[Path] = []
    for given in paths:
        root = Path(given)
        if root.is_dir():
            for found in sorted(root.rglob("*")):
                if _SKIPPED.intersection(found.relative_to(root).parts) or any(
                    part.startswith(".") for part in found.relative_to(root).parts
                ):
                    continue
                if is_test_file(found):
                    tests.append(found)
                elif found.suffix.lower() in POLICY_SUFFIXES and _looks_like_policy(found):
                    candidates.append(found)
        elif not is_test_file(root) and _looks_like_policy(root):
            candidates.append(root)
            stem = root.name[: -len(root.suffix)] if root.suffix else root.name
            tests += [p for p in (root.with_name(stem + suffix) for suffix in TEST_SUFFIXES) if p.is_file()]
        else:
            tests.append(root)
    return list(dict.fromkeys(tests)), candidates


#: Folders a search for test files does not enter (besides hidden ones).
_SKIPPED = frozenset({"node_modules", "__pycache__"})
#: Files past this size are not read to see whether they are policies.
_POLICY_MAX_BYTES = 1 << 20


def _looks_like_policy(path: Path) -> bool:
    try:
        if not path.is_file() or path.stat().st_size > _POLICY_MAX_BYTES:
            return False
        text = path.read_text(encoding="utf-8-sig")
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and isinstance(data.get("hooks"), dict)


__all__ = [
    "Case",
    "CaseFile",
    "Expect",
    "LoadedCase",
    "Prior",
    "Session",
    "Stub",
    "Suite",
    "default_policy",
    "discover",
    "is_test_file",
    "line_map",
    "line_of",
    "load_suite",
]
