"""Loading, layering and validating policy files (reference: docs/policy.md).

A policy file is JSON or YAML: Claude Code's settings format (so an existing
``settings.json`` loads unchanged) plus the ``hookbus:`` platform section. Every problem in
every file is collected with its line number and raised together as one :class:`PolicyError`.
Several files layer like Claude Code's settings levels: hooks append in file order (identical
handlers run once), ``hookbus:`` keys of later files override earlier ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

import yaml
from pydantic import Field, TypeAdapter, ValidationError

from bus.errors import PolicyError, PolicyProblem
from bus.hooks.claude_settings import SETTINGS_KEYS
from bus.hooks.events import EVENTS, HANDLER_TYPES, IF_EVENTS, NO_HTTP_EVENTS, event_spec
from bus.hooks.matching import compile_matcher
from bus.policy import schema
from bus.policy.approvals import merged_setting
from bus.policy.compiled import compile_policy
from bus.policy.entries import HandlerEntry
from bus.policy.packs import pack_sources, pack_text
from bus.policy.placeholders import literal_program, reparse_warning
from bus.policy.schema import (
    CommandHandler,
    Handler,
    HttpHandler,
    Loc,
    MatcherGroup,
    McpToolHandler,
    PlatformSettings,
    RuleHandler,
)
from bus.policy.sessioncheck import check_session, folded, whens_of
from bus.rules.permissions import parse_rule

_describe: Final = schema.describe_value
_HANDLER: Final[TypeAdapter[Handler]] = TypeAdapter(Handler)
_PLATFORM: Final = TypeAdapter(PlatformSettings)
_GROUP: Final = TypeAdapter(MatcherGroup)
_STR_LIST: Final = TypeAdapter(list[Annotated[str, Field(min_length=1)]])
#: Top-level keys read besides ``hooks`` and ``hookbus``: their type and PolicyFile attribute.
_TOP_LEVEL: Final[dict[str, tuple[TypeAdapter[Any], str | None]]] = {
    "disableAllHooks": (TypeAdapter(bool), "disable_all_hooks"),
    "allowedHttpHookUrls": (_STR_LIST, "allowed_http_hook_urls"),
    "httpHookAllowedEnvVars": (_STR_LIST, "http_hook_allowed_env_vars"),
    "$schema": (TypeAdapter(str), None),
    "description": (TypeAdapter(str), None),  # plugin hooks/hooks.json files have one
}


@dataclass
class PolicyFile:
    """One parsed and checked policy file, before layering; ``problems`` empty when valid."""

    source: str
    text: str
    entries: list[HandlerEntry] = field(default_factory=list)
    platform: dict[str, Any] = field(default_factory=dict)
    disable_all_hooks: bool | None = None
    allowed_http_hook_urls: list[str] | None = None
    http_hook_allowed_env_vars: list[str] | None = None
    #: The built-in packs it includes (``hookbus.include``); their handlers come first in ``entries``.
    packs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[PolicyProblem] = field(default_factory=list)
    whens: list[tuple[Loc, Any]] = field(default_factory=list)  # each `when:`, checked with hookbus.session


@dataclass(frozen=True, repr=False, eq=False)
class Policy:
    """A loaded, validated, layered policy. ``entries(event)`` is one dict lookup."""

    settings: PlatformSettings
    revision: str
    sources: tuple[str, ...]
    disable_all_hooks: bool
    allowed_http_hook_urls: tuple[str, ...] | None
    http_hook_allowed_env_vars: tuple[str, ...] | None
    notes: tuple[str, ...]
    by_event: Mapping[str, tuple[HandlerEntry, ...]]  # empty when disable_all_hooks
    #: The parsed files it was layered from (to layer it again under a tenant's).
    files: tuple[PolicyFile, ...] = ()

    def entries(self, event: str) -> tuple[HandlerEntry, ...]:
        """Every handler for ``event`` in policy order, deduplicated; empty when hooks are disabled."""
        return self.by_event.get(event, ())

    def events(self) -> frozenset[str]:
        """The events that have at least one handler."""
        return frozenset(self.by_event)

    @property
    def handler_count(self) -> int:
        """How many handlers run (0 when hooks are disabled); plugins are not counted."""
        return sum(len(found) for found in self.by_event.values())

    @property
    def empty(self) -> bool:
        """True when no handler and no plugin can ever give an opinion."""
        return not self.by_event and not self.settings.plugins

    def entry(self, handler_id: str) -> HandlerEntry | None:
        """The handler with this id (e.g. named by a queued async job), or None."""
        return self._by_id.get(handler_id)

    @cached_property
    def _by_id(self) -> dict[str, HandlerEntry]:
        return {e.handler_id: e for found in self.by_event.values() for e in found}

    def __repr__(self) -> str:
        return f"<Policy {self.revision} sources={list(self.sources)} handlers={self.handler_count}>"


def _line_map(node: yaml.Node | None) -> dict[Loc, int]:
    """Map each path (mapping keys, list indexes) of a composed YAML tree to its 1-based line."""
    lines: dict[Loc, int] = {} if node is None else {(): node.start_mark.line + 1}
    stack: list[tuple[yaml.Node | None, Loc]] = [(node, ())]
    while stack:
        current, loc = stack.pop()
        if isinstance(current, yaml.MappingNode):
            children = [(k.value, k, v) for k, v in current.value if isinstance(k, yaml.ScalarNode)]
        elif isinstance(current, yaml.SequenceNode):
            children = [(i, item, item) for i, item in enumerate(current.value)]
        else:
            continue
        for key, at, child in children:
            lines[(*loc, key)] = at.start_mark.line + 1
            stack.append((child, (*loc, key)))  # a tree: aliases are refused (_PolicyLoader)
    return lines


class _PolicyLoader(yaml.SafeLoader):
    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):  # a few hundred bytes of them can expand to billions of nodes
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "aliases ('*name') are not allowed in a policy file", mark)
        return super().compose_node(parent, index)


def _read_tree(text: str, source: str) -> tuple[Any, dict[Loc, int]]:
    """``text`` parsed as JSON or YAML, and a path -> line map; raises PolicyError on syntax."""
    ext = Path(source).suffix.lower()
    if ext == ".json" or (ext not in (".yaml", ".yml") and text.lstrip()[:1] in ("{", "[")):
        try:  # json decides the values (YAML 1.1 reads 1e5 as a string); YAML only gives lines
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if ext == ".json":
                message = f"invalid JSON: {exc.msg} (column {exc.colno})"
                raise PolicyError([PolicyProblem(source, exc.lineno, "", message)]) from exc
        else:
            try:  # tabs are JSON whitespace but not YAML's (and never raw inside JSON strings)
                return data, _line_map(yaml.compose(text.replace("\t", " "), Loader=_PolicyLoader))
            except yaml.YAMLError:
                return data, {}
    loader = _PolicyLoader(text)
    try:
        node = loader.get_single_node()
        return (None if node is None else loader.construct_document(node)), _line_map(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = "" if mark is None else f" (column {mark.column + 1})"
        what = getattr(exc, "problem", None) or getattr(exc, "context", None) or exc
        line = None if mark is None else mark.line + 1
        raise PolicyError([PolicyProblem(source, line, "", f"invalid YAML: {what}{where}")]) from exc
    finally:
        loader.dispose()


def _render(loc: Loc) -> str:
    """``('hooks', 'PreToolUse', 0, 'timeout')`` -> ``hooks.PreToolUse[0].timeout``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Checker:
    """Collects the problems and notes of one file, locating each by its path."""

    def __init__(self, out: PolicyFile, lines: dict[Loc, int]) -> None:
        self.out, self.lines = out, lines

    def line(self, loc: Loc) -> int | None:
        for n in range(len(loc), -1, -1):
            if (found := self.lines.get(loc[:n])) is not None:
                return found
        return None

    def problem(self, loc: Loc, message: str, at: Loc | None = None) -> None:
        line = self.line(loc if at is None else at)
        self.out.problems.append(PolicyProblem(self.out.source, line, _render(loc), message))

    def note(self, loc: Loc, message: str) -> None:
        line = self.line(loc)
        self.out.notes.append(f"{self.out.source}{'' if line is None else f':{line}'}: {message}")

    def failed(self, exc: Exception, loc: Loc, what: str, text: str) -> None:
        """Report an error raised by another module's parser (its type is not ours to know)."""
        self.problem(loc, str(exc) if repr(text) in str(exc) else f"invalid {what} {text!r}: {exc}")

    def validate(self, adapter: TypeAdapter[Any], value: Any, loc: Loc, word: str = "field") -> Any:
        """``adapter``'s result for ``value``, or None after reporting every error."""
        try:
            return adapter.validate_python(value, strict=True, by_alias=True, by_name=False)
        except ValidationError as exc:
            for where, at, message in schema.human_errors(exc, word):
                self.problem((*loc, *where), message, (*loc, *at))
            return None


#: Handler fields added after ids were first handed out: left out of the id while unset, so that
#: the ids of existing handlers (in queued jobs, metrics, ``once`` markers) stay what they were.
_LATER_FIELDS: Final = ("maxTries", "maxAgeSeconds", "secret", "agents", "when")


def _handler_id(event: str, matcher: str | None, handler: Handler) -> str:
    dumped = handler.model_dump(mode="json", by_alias=True)
    for name in _LATER_FIELDS:
        if dumped.get(name, 0) is None:
            del dumped[name]
    canonical = json.dumps([event, matcher, dumped], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _check_handler(ck: _Checker, event: str, loc: Loc, handler: Handler) -> None:
    allowed = event_spec(event).handler_types - ({"http"} if event in NO_HTTP_EVENTS else set())
    if handler.type not in allowed:
        names = ", ".join(t for t in HANDLER_TYPES if t in allowed)
        ck.problem((*loc, "type"), f"handler type {handler.type!r} not allowed on {event} (allowed: {names})")
    rules: list[tuple[Loc, str]] = []
    if handler.if_ is not None:
        rules.append(((*loc, "if"), handler.if_))
        if event not in IF_EVENTS:
            ck.note((*loc, "if"), f"'if' is only evaluated on tool events: this never runs on {event}")
    if isinstance(handler, RuleHandler):
        for kind in ("deny", "ask", "allow"):
            rules += [((*loc, kind, i), text) for i, text in enumerate(getattr(handler, kind))]
    elif isinstance(handler, HttpHandler | McpToolHandler) and handler.url is not None:
        parts = urlsplit(handler.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            ck.problem((*loc, "url"), f"must be an http(s) URL like https://host/path (got {handler.url!r})")
    elif isinstance(handler, CommandHandler):
        if (program := literal_program(handler)) is not None and not Path(program).exists():
            ck.note((*loc, "command"), f"{program} does not exist on this machine (the hook fails where it does not)")
        if (why := reparse_warning(handler)) is not None:
            ck.note((*loc, "args"), why)
    for rule_loc, text in rules:
        try:
            parse_rule(text)
        except Exception as exc:
            ck.failed(exc, rule_loc, "permission rule", text)


def _valid_handlers(raw: Any) -> list[tuple[int, Handler]]:
    """The handlers of an invalid group that do validate on their own (to check them too)."""
    items = raw.get("hooks") if isinstance(raw, dict) else None
    handlers = []
    for hi, item in enumerate(items if isinstance(items, list) else ()):
        try:
            handlers.append((hi, _HANDLER.validate_python(item, strict=True, by_name=False)))
        except ValidationError:
            pass
    return handlers


def _check_group(ck: _Checker, event: str, gloc: Loc, gi: int, raw: Any) -> None:
    group: MatcherGroup | None = ck.validate(_GROUP, raw, gloc)
    if group is not None:
        matcher, handlers = group.matcher, list(enumerate(group.hooks))
    else:  # reported; still check what does validate, so every problem shows at once
        matcher, handlers = raw.get("matcher") if isinstance(raw, dict) else None, _valid_handlers(raw)
    if isinstance(matcher, str):
        try:
            compile_matcher(matcher, event)
        except Exception as exc:
            ck.failed(exc, (*gloc, "matcher"), "matcher", matcher)
        if event in EVENTS and event_spec(event).matcher_field is None and matcher.strip() not in ("", "*"):
            ck.note((*gloc, "matcher"), f"{event} has no matcher: matcher {matcher!r} is ignored")
    ck.out.whens += whens_of(gloc, group) if group is not None else ()
    for hi, handler in handlers:
        _check_handler(ck, event, (*gloc, "hooks", hi), handler)
        if group is not None:
            handler = folded(group, handler)
            entry_id = _handler_id(event, group.matcher, handler)
            entry = HandlerEntry(event, gi, hi, group.matcher, handler, entry_id, ck.out.source)
            ck.out.entries.append(entry)


def _check_hooks(ck: _Checker, hooks: Any) -> None:
    if not isinstance(hooks, dict):
        ck.problem(("hooks",), f"must be a mapping of events to matcher groups (got {_describe(hooks)})")
        return
    for key, groups in hooks.items():
        event, loc = str(key), ("hooks", str(key))
        if event not in EVENTS:
            if hint := schema.suggest(event, EVENTS):
                ck.problem(loc, f"unknown event {event!r}{hint}")
                continue
            ck.note(loc, f"unknown event {event!r} accepted as non-blocking (Claude Code never fires it)")
        if not isinstance(groups, list):
            ck.problem(loc, f"must be a list of matcher groups (got {_describe(groups)})")
            continue
        for gi, raw in enumerate(groups):
            _check_group(ck, event, (*loc, gi), gi, raw)


def _check_platform(ck: _Checker, section: Any) -> None:
    if ck.validate(_PLATFORM, section, ("hookbus",), word="key") is not None:  # deadlines, CIDRs, URL too
        ck.out.platform = {key: value for key, value in section.items() if key != "include"}
        ck.out.packs = list(dict.fromkeys(section.get("include") or ()))


def parse_policy_text(text: str, source: str) -> PolicyFile:
    """Parse and check one policy file's text; never raises, problems are in the result.

    ``source`` names the file in problems and notes; its extension picks the format
    (``.json``; ``.yaml``/``.yml``; anything else: JSON if it parses as such, else YAML).
    """
    out = PolicyFile(source=source, text=text)
    try:
        data, lines = _read_tree(text, source)
    except PolicyError as exc:
        out.problems += exc.problems
        return out
    ck = _Checker(out, lines)
    if data is None:
        ck.note((), "empty policy file")
    elif not isinstance(data, dict):
        ck.problem((), f"the top level must be a mapping (got {_describe(data)})")
    for key, value in data.items() if isinstance(data, dict) else ():
        name, loc = str(key), (str(key),)
        if name == "hooks":
            _check_hooks(ck, value)
        elif name == "hookbus":
            _check_platform(ck, value)
        elif name in _TOP_LEVEL:
            adapter, attr = _TOP_LEVEL[name]
            found = ck.validate(adapter, value, loc)
            if attr is not None:
                setattr(out, attr, found)
        elif name in SETTINGS_KEYS:
            ck.note(loc, f"ignored Claude Code settings key {name!r}")
        elif hint := schema.suggest(name, [*SETTINGS_KEYS, "hookbus"]):
            ck.problem((), f"unknown key {name!r}{hint}", loc)
        else:  # Claude Code's schema admits keys it does not list, and new releases add some
            ck.note(loc, f"ignored unknown top-level key {name!r} (not a Claude Code setting hookbus knows)")
    if not any(problem.path.startswith("hookbus") for problem in out.problems):  # else its names are unknown
        check_session(ck, out.platform, out.whens)
    included = [parse_policy_text(text, source) for source, text in pack_sources(out.packs)]
    out.entries[:0] = [entry for pack in included for entry in pack.entries]  # a pack's handlers come first
    out.problems += [problem for pack in included for problem in pack.problems]
    out.problems.sort(key=lambda problem: problem.line or 0)  # stable: pydantic's order within a line
    return out


def _union(lists: Iterable[list[str] | None]) -> tuple[str, ...] | None:
    given = [found for found in lists if found is not None]
    return tuple(dict.fromkeys(item for found in given for item in found)) if given else None


def merge_policy(files: Sequence[PolicyFile]) -> Policy:
    """Layer parsed files, in order, into one Policy; raises PolicyError with every file's problems."""
    if problems := [problem for f in files for problem in f.problems]:
        raise PolicyError(problems)
    platform: dict[str, Any] = {}
    disable = False
    notes = [note for f in files for note in f.notes]
    by_event: dict[str, list[HandlerEntry]] = {}
    seen: dict[str, HandlerEntry] = {}
    digest = hashlib.sha256()
    for f in files:
        for key, value in f.platform.items():  # later files override, key by key
            platform[key] = merged_setting(key, platform.get(key), value)
        disable = disable if f.disable_all_hooks is None else f.disable_all_hooks
        for entry in f.entries:
            if (first := seen.setdefault(entry.handler_id, entry)) is not entry:
                if entry.source == first.source and entry.source != f.source:
                    continue  # the same pack included by two files: nothing to tell
                where = _render(("hooks", entry.event, entry.group_index, "hooks", entry.handler_index))
                notes.append(f"{f.source}: {where} duplicates a handler of {first.source}: it runs once")
            else:
                by_event.setdefault(entry.event, []).append(entry)
        for data in (f.text.encode(), *(pack_text(name).encode() for name in f.packs)):
            digest.update(len(data).to_bytes(8, "big") + data)
    if disable and seen:
        notes.append("disableAllHooks is true: no handler runs")
    return compile_policy(
        Policy(
            settings=_PLATFORM.validate_python(platform, strict=True, by_alias=True, by_name=False),
            revision=digest.hexdigest()[:12],
            sources=tuple(f.source for f in files),
            disable_all_hooks=disable,
            allowed_http_hook_urls=_union(f.allowed_http_hook_urls for f in files),
            http_hook_allowed_env_vars=_union(f.http_hook_allowed_env_vars for f in files),
            notes=tuple(notes),
            by_event={} if disable else {event: tuple(found) for event, found in by_event.items()},
            files=tuple(files),
        )
    )


def read_policy_files(paths: Sequence[str | Path]) -> list[PolicyFile]:
    """Parse and check the files at ``paths``; never raises (problems are in the results)."""
    files = []
    for path in [paths] if isinstance(paths, str | Path) else paths:
        try:
            files.append(parse_policy_text(Path(path).read_text(encoding="utf-8-sig"), str(path)))
        except (OSError, UnicodeDecodeError) as exc:
            problem = PolicyProblem(str(path), None, "", f"cannot read: {exc}")
            files.append(PolicyFile(str(path), "", problems=[problem]))
    return files


def load_policy(paths: Sequence[str | Path]) -> Policy:
    """Load, check, layer (later files override) and compile the policy files at ``paths``;
    raises PolicyError listing every problem of every file, each with its line."""
    return merge_policy(read_policy_files(paths))


def policy_from_text(text: str, source: str = "policy.yaml") -> Policy:
    """A Policy from one file's text (tests, inline policies); raises PolicyError."""
    return merge_policy([parse_policy_text(text, source)])


def empty_policy() -> Policy:
    """The policy with no handlers and default platform settings."""
    return merge_policy([])


__all__ = [
    "HandlerEntry",
    "Policy",
    "PolicyFile",
    "empty_policy",
    "load_policy",
    "merge_policy",
    "parse_policy_text",
    "policy_from_text",
]
