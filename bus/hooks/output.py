"""Reading a handler's answer: stdout / response-body parsing and per-event output checks.

A handler's raw answer becomes a :class:`~bus.hooks.results.HandlerResult` by Claude Code's hook
output rules (exit codes, stdout parsing, the per-event output schema; its v2.1.248+ parser):

* **Parsing.** Trimmed text that starts with ``{`` and ends with ``}`` is JSON. When it does
  not parse as one value but is several lines that each parse, it is plain text if no line
  sets a universal output field and a parse failure if one does. Anything else (text,
  arrays, quoted strings, ``{`` without a closing ``}``) is plain text. A parse failure or a
  schema failure is :attr:`Outcome.ERROR` and the text is dropped, never used as context.
* **Exit 0 / http 2xx / mcp_tool text.** A JSON object → ``OK`` with the cleaned ``output``;
  empty → ``OK`` with nothing; plain text → ``OK`` with ``text`` (command and mcp_tool only;
  an http body that is not a JSON object is an ``ERROR``).
* **Exit 2.** ``BLOCK``, even when the JSON says ``allow``. The JSON is still kept (without
  ``hookSpecificOutput`` on Elicitation/ElicitationResult); if it fails the schema it is
  dropped and stderr is the reason.
* **Any other exit code** (1, 127, negative signal codes). A schema-valid JSON object wins
  and the code is ignored; otherwise ``ERROR`` with ``Failed with non-blocking status code:
  <first stderr line>``.

Choices where Claude Code is silent, or where a central service has to differ:

* The exit-2 reason is the first non-empty of: ``reason`` (unless ``decision`` is
  ``approve``), ``hookSpecificOutput.permissionDecisionReason`` (unless the decision there is
  not ``deny``), ``stopReason`` (only with ``continue: false``), stripped stderr, and finally
  ``No stderr output``. An ``allow`` reason is never turned into a deny message.
* PermissionRequest ignores exit 2: a schema-valid JSON object on stdout is honoured
  as on any other code, otherwise the result is ``OK`` with nothing (stderr is discarded
  and Claude Code shows no error).
* WorktreeCreate: a command's path is the last non-empty stdout line with ANSI escapes
  stripped; it is stored as ``output.hookSpecificOutput.worktreePath``, the form an http hook
  returns. A JSON object with that field is read as usual. Empty stdout is ``OK`` with
  nothing (a side-effect-only handler must not fail creation; the merge just has no path).
  Any non-zero exit is ``BLOCK``. WorktreeRemove discards JSON; non-zero exit is ``BLOCK``
  (hookbus cannot see whether the directory still exists on the agent, so it assumes so).
* JSON ``null`` counts as an absent field. ``decision: "approve"`` outside PreToolUse is
  dropped as "no decision". Unknown keys are dropped, also inside
  ``hookSpecificOutput``. A ``terminalSequence`` that is not allowlisted is dropped, not an
  error. Fields an event discards (Claude Code ignores them there) are removed, see :func:`drop_discarded`.
* Size cap: ``additionalContext``, ``systemMessage``, ``initialUserMessage`` and plain text
  longer than 10,000 characters are cut to their first 2,000 plus a note. Claude Code saves
  the rest in the session directory, which does not exist centrally.
* The schema is checked with plain code instead of pydantic: this runs on every result of
  every blocking event, and most of it is cleaning (dropping, capping), not validation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from bus.errors import OutputSchemaError
from bus.hooks.events import event_spec
from bus.hooks.results import HandlerResult, Outcome

#: Claude Code's per-string size cap, and what hookbus keeps of a longer string.
TEXT_CAP: Final = 10_000
PREVIEW_CHARS: Final = 2_000

#: The output fields every event understands (Claude Code's universal output fields).
UNIVERSAL_FIELDS: Final = frozenset(
    {
        "continue",
        "stopReason",
        "suppressOutput",
        "systemMessage",
        "terminalSequence",
        "decision",
        "reason",
        "hookSpecificOutput",
    }
)

_NO_STDERR: Final = "No stderr output"
_ANSI: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_TERMINAL_SEQUENCE: Final = re.compile(r"(?:\x1b\](?:0|1|2|9|99|777);[^\x00-\x1f\x7f]*(?:\x07|\x1b\\)|\x07)+")
_ELICITATION: Final = frozenset({"Elicitation", "ElicitationResult"})
_NOT_SHOWN: Final = frozenset({"systemMessage", "continue", "stopReason"})
_NO_CONTINUE: Final = frozenset({"continue", "stopReason"})
#: Universal fields each event drops (Claude Code ignores them there); ``stopReason`` goes wherever ``continue`` goes.
_DISCARDED: Final[Mapping[str, frozenset[str]]] = {
    "Notification": _NOT_SHOWN,
    "MessageDisplay": _NOT_SHOWN,
    "ConfigChange": _NOT_SHOWN,
    "WorktreeCreate": _NOT_SHOWN,
    "PreCompact": _NOT_SHOWN,
    "PostCompact": _NOT_SHOWN,
    "Elicitation": _NOT_SHOWN,
    "ElicitationResult": _NOT_SHOWN,
    "CwdChanged": _NO_CONTINUE,
    "FileChanged": _NO_CONTINUE,
    "DirectoryAdded": _NO_CONTINUE,
    "TaskCreated": _NO_CONTINUE,
}
#: Events that read nothing of the JSON but these fields.
_KEEP_ONLY: Final[Mapping[str, frozenset[str]]] = {
    "InstructionsLoaded": frozenset(),
    "SessionEnd": frozenset(),
    "Setup": frozenset(),
    "WorktreeRemove": frozenset(),
    "StopFailure": frozenset({"terminalSequence"}),
}

_Check = Callable[[str, str, Any], Any]


def result_from_exit(event: str, exit_code: int, stdout: str, stderr: str) -> HandlerResult:
    """Turn a finished command's exit code, stdout and stderr into a HandlerResult, by Claude Code's rules."""
    if event in ("WorktreeCreate", "WorktreeRemove") and exit_code != 0:
        reason = stderr.strip() or f"{event} hook failed with exit code {exit_code}"
        return HandlerResult(Outcome.BLOCK, reason=reason)
    if event == "WorktreeRemove":
        return HandlerResult(Outcome.OK)
    if exit_code == 0:
        return _from_answer(event, stdout, plain_text_ok=True)
    if exit_code == 2 and event == "PermissionRequest":
        return HandlerResult(Outcome.OK, output=_kept_object(event, stdout))
    if exit_code == 2:
        obj = _kept_object(event, stdout)
        reason = (_json_block_reason(obj) if obj else None) or stderr.strip() or _NO_STDERR
        return HandlerResult(Outcome.BLOCK, output=obj, reason=reason)
    answer = _read_answer(event, stdout)
    if isinstance(answer, HandlerResult):
        return answer
    return HandlerResult(Outcome.ERROR, reason=f"Failed with non-blocking status code: {_first_line(stderr)}")


def result_from_body(event: str, body: str, *, plain_text_ok: bool = False) -> HandlerResult:
    """Turn a 2xx http/mcp_tool text answer into a HandlerResult, parsed like exit-0 stdout.

    An http body that is neither empty nor a JSON object is a non-blocking error, as for Claude Code's http hooks;
    ``plain_text_ok=True`` (mcp_tool) keeps it as ``text`` like command stdout.
    """
    return _from_answer(event, body, plain_text_ok=plain_text_ok)


def check_output(event: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Validate a JSON output object for ``event``; return it cleaned (fields valid for the event).

    Raises :class:`~bus.errors.OutputSchemaError` when a known field has the wrong type or
    value, or ``hookSpecificOutput.hookEventName`` is not ``event``.
    """
    if not isinstance(obj, dict):
        raise OutputSchemaError(f"hook output: expected a JSON object, got {_kind(obj)}")
    out: dict[str, Any] = {}
    for key, value in obj.items():
        check = _UNIVERSAL_CHECKS.get(key)
        if check is None or value is None:
            continue
        cleaned = check(event, key, value)
        if cleaned is not None:
            out[key] = cleaned
    return drop_discarded(event, out)


def drop_discarded(event: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without the universal fields ``event`` discards; may return ``obj`` itself."""
    keep = _KEEP_ONLY.get(event)
    if keep is not None:
        return {k: v for k, v in obj.items() if k in keep}
    drop = _DISCARDED.get(event)
    if drop is None or drop.isdisjoint(obj):
        return obj
    return {k: v for k, v in obj.items() if k not in drop}


def cap_text(text: str) -> str:
    """``text``, or its first 2,000 characters plus a note when it is over Claude Code's 10,000 cap."""
    if len(text) <= TEXT_CAP:
        return text
    return (
        f"{text[:PREVIEW_CHARS]}\n[hookbus: output truncated; showing the first {PREVIEW_CHARS:,} "
        f"of {len(text):,} characters]"
    )


# ---- reading stdout / bodies --------------------------------------------------------------


def _from_answer(event: str, raw: str, *, plain_text_ok: bool) -> HandlerResult:
    answer = _read_answer(event, raw)
    if isinstance(answer, HandlerResult):
        return answer
    if answer is None:
        return HandlerResult(Outcome.OK)
    if not plain_text_ok:
        return HandlerResult(Outcome.ERROR, reason="hook answer is not a JSON object; ignored")
    if event == "WorktreeCreate":
        lines = [line for line in (_ANSI.sub("", ln).strip() for ln in answer.splitlines()) if line]
        if not lines:
            return HandlerResult(Outcome.OK)
        path = {"hookEventName": event, "worktreePath": lines[-1]}
        return HandlerResult(Outcome.OK, output={"hookSpecificOutput": path})
    return HandlerResult(Outcome.OK, text=cap_text(answer))


def _read_answer(event: str, raw: str) -> HandlerResult | str | None:
    """``OK``/``ERROR`` result for JSON (valid or not), the trimmed text for plain text, None if empty."""
    trimmed = raw.strip()
    if not trimmed:
        return None
    try:
        obj = _parse_json(trimmed)
    except ValueError as exc:
        return HandlerResult(Outcome.ERROR, reason=str(exc))
    if obj is None:
        return trimmed
    try:
        return HandlerResult(Outcome.OK, output=check_output(event, obj))
    except OutputSchemaError as exc:
        return HandlerResult(Outcome.ERROR, reason=f"hook output failed schema validation: {exc}")


def _parse_json(trimmed: str) -> dict[str, Any] | None:
    """The JSON object in ``trimmed``, or None when it is plain text; ValueError on a parse failure."""
    if not (trimmed.startswith("{") and trimmed.endswith("}")):
        return None
    try:
        value = orjson.loads(trimmed)
    except orjson.JSONDecodeError as exc:
        lines = [line for line in trimmed.splitlines() if line.strip()]
        if len(lines) < 2:
            raise ValueError(f"hook output is not valid JSON: {exc}") from None
        try:
            values = [orjson.loads(line) for line in lines]
        except orjson.JSONDecodeError:
            raise ValueError(f"hook output is not valid JSON: {exc}") from None
        if any(isinstance(v, dict) and not UNIVERSAL_FIELDS.isdisjoint(v) for v in values):
            raise ValueError("hook output holds several JSON values and one sets an output field") from None
        return None
    if not isinstance(value, dict):  # pragma: no cover - "{...}" that parses is always an object
        raise ValueError("hook output is not a JSON object")
    return value


def _kept_object(event: str, stdout: str) -> dict[str, Any] | None:
    """The cleaned JSON object on stdout, or None (not JSON, unparsable or schema-invalid)."""
    try:
        obj = _parse_json(stdout.strip())
    except ValueError:
        return None
    if obj is None:
        return None
    if event in _ELICITATION:
        obj = {k: v for k, v in obj.items() if k != "hookSpecificOutput"}
    try:
        return check_output(event, obj)
    except OutputSchemaError:
        return None


def _json_block_reason(obj: dict[str, Any]) -> str | None:
    specific = obj.get("hookSpecificOutput", {})
    denies = specific.get("permissionDecision", "deny") == "deny"
    candidates = (
        obj.get("reason") if obj.get("decision", "block") == "block" else None,
        specific.get("permissionDecisionReason") if denies else None,
        obj.get("stopReason") if obj.get("continue") is False else None,
    )
    return next((c for c in candidates if isinstance(c, str) and c.strip()), None)


def _first_line(stderr: str) -> str:
    return next((line.strip() for line in stderr.splitlines() if line.strip()), _NO_STDERR)


# ---- field checks -------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    kinds = {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}
    return kinds.get(type(value), "null" if value is None else type(value).__name__)


def _bad(path: str, expected: str, value: Any) -> OutputSchemaError:
    return OutputSchemaError(f"{path}: expected {expected}, got {_kind(value)}")


def _typed(kind: type, expected: str) -> _Check:
    def check(event: str, path: str, value: Any) -> Any:
        if isinstance(value, kind):
            return value
        raise _bad(path, expected, value)

    return check


_bool = _typed(bool, "a boolean")
_str = _typed(str, "a string")
_object = _typed(dict, "an object")
_array = _typed(list, "an array")


def _capped(event: str, path: str, value: Any) -> Any:
    return cap_text(_str(event, path, value))


def _strings(event: str, path: str, value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise _bad(path, "an array of strings", value)


def _anything(event: str, path: str, value: Any) -> Any:
    return value


def _one_of(*allowed: str) -> _Check:
    def check(event: str, path: str, value: Any) -> Any:
        if value in allowed:
            return value
        raise _bad(path, "one of " + ", ".join(allowed), value)

    return check


def _terminal_sequence(event: str, path: str, value: Any) -> Any:
    return value if isinstance(value, str) and _TERMINAL_SEQUENCE.fullmatch(value) else None


def _decision(event: str, path: str, value: Any) -> Any:
    if event == "PreToolUse":
        return _one_of("approve", "block")(event, path, value)
    return None if value == "approve" else _one_of("block")(event, path, value)


def _permission_decision(event: str, path: str, value: Any) -> Any:
    allowed = ("allow", "deny", "ask", "defer") if event == "PreToolUse" else ("allow", "deny", "ask")
    return _one_of(*allowed)(event, path, value)


_DESTINATIONS = ("session", "localSettings", "projectSettings", "userSettings")
_MODES = ("default", "auto", "acceptEdits", "dontAsk", "bypassPermissions", "plan", "manual")
_RULE_UPDATES = ("addRules", "replaceRules", "removeRules")
_UPDATE_TYPES = (*_RULE_UPDATES, "setMode", "addDirectories", "removeDirectories")


def _permission_update(path: str, entry: Any) -> dict[str, Any]:
    """One PermissionRequest ``updatedPermissions`` entry; unknown keys are kept, known ones type-checked."""
    _object("", path, entry)
    kind = _one_of(*_UPDATE_TYPES)("", f"{path}.type", entry.get("type"))
    if "destination" in entry:
        _one_of(*_DESTINATIONS)("", f"{path}.destination", entry["destination"])
    if kind in _RULE_UPDATES:
        _one_of("allow", "deny", "ask")("", f"{path}.behavior", entry.get("behavior"))
        for n, rule in enumerate(_array("", f"{path}.rules", entry.get("rules"))):
            _str("", f"{path}.rules[{n}].toolName", _object("", f"{path}.rules[{n}]", rule).get("toolName"))
            if rule.get("ruleContent") is not None:
                _str("", f"{path}.rules[{n}].ruleContent", rule["ruleContent"])
    elif kind == "setMode":
        _one_of(*_MODES)("", f"{path}.mode", entry.get("mode"))
    else:
        _strings("", f"{path}.directories", entry.get("directories"))
    return dict(entry)


def _permission_request_decision(event: str, path: str, value: Any) -> Any:
    """PermissionRequest's ``decision`` object; fields of the other behaviour are dropped."""
    _object(event, path, value)
    behavior = _one_of("allow", "deny")(event, f"{path}.behavior", value.get("behavior"))
    out: dict[str, Any] = {"behavior": behavior}
    if behavior == "allow":
        if value.get("updatedInput") is not None:
            out["updatedInput"] = _object(event, f"{path}.updatedInput", value["updatedInput"])
        if value.get("updatedPermissions") is not None:
            entries = _array(event, f"{path}.updatedPermissions", value["updatedPermissions"])
            out["updatedPermissions"] = [
                _permission_update(f"{path}.updatedPermissions[{n}]", e) for n, e in enumerate(entries)
            ]
    else:
        if value.get("message") is not None:
            out["message"] = _str(event, f"{path}.message", value["message"])
        if value.get("interrupt") is not None:
            out["interrupt"] = _bool(event, f"{path}.interrupt", value["interrupt"])
    return out


_SPECIFIC_CHECKS: Final[Mapping[str, _Check]] = {
    "permissionDecision": _permission_decision,
    "permissionDecisionReason": _str,
    "updatedInput": _object,
    "additionalContext": _capped,
    "classifierContext": _str,
    "updatedToolOutput": _anything,
    "updatedMCPToolOutput": _anything,
    "sessionTitle": _str,
    "suppressOriginalPrompt": _bool,
    "initialUserMessage": _capped,
    "watchPaths": _strings,
    "reloadSkills": _bool,
    "retry": _bool,
    "worktreePath": _str,
    "action": _one_of("accept", "decline", "cancel"),
    "content": _object,
    "displayContent": _str,
    "updatedMessages": _array,
    "decision": _permission_request_decision,
}


def _specific(event: str, path: str, value: Any) -> Any:
    _object(event, path, value)
    name = value.get("hookEventName")
    if name != event:
        raise OutputSchemaError(f"{path}.hookEventName: expected {event!r}, got {_kind(name)}")
    allowed = event_spec(event).specific_fields
    out: dict[str, Any] = {}
    for key, field in value.items():
        if key in allowed and field is not None:
            out[key] = _SPECIFIC_CHECKS.get(key, _anything)(event, f"{path}.{key}", field)
    return {"hookEventName": event, **out} if out else None


_UNIVERSAL_CHECKS: Final[Mapping[str, _Check]] = {
    "continue": _bool,
    "stopReason": _str,
    "suppressOutput": _bool,
    "systemMessage": _capped,
    "terminalSequence": _terminal_sequence,
    "decision": _decision,
    "reason": _str,
    "hookSpecificOutput": _specific,
}

__all__ = [
    "PREVIEW_CHARS",
    "TEXT_CAP",
    "UNIVERSAL_FIELDS",
    "cap_text",
    "check_output",
    "drop_discarded",
    "result_from_body",
    "result_from_exit",
]
