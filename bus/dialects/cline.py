"""Cline's dialect (``cline``, the ``cline`` CLI and its SDK; file hooks running ``hookbus hook``).

Cline runs an executable per event, named after it, from its hooks folders, and sends one
camelCase JSON object on stdin. Input: there is no ``hook_event_name`` or ``session_id``;
``hookName`` (the SDK's event) becomes the Claude Code event, kept as ``agent_event_name``;
``taskId`` (``conv_...``) becomes ``session_id`` and ``workspaceRoots[0]`` (else
``workspaceInfo.rootPath``) ``cwd``. Every field Cline sends is kept (``timestamp``,
``sessionContext``, ``agent_id``, ``iteration``, ...). Event by event:

* ``tool_call`` (file ``PreToolUse``) -> PreToolUse: ``tool_call{id, name, input}`` fills
  ``tool_use_id``, ``tool_name`` and ``tool_input`` (else ``preToolUse{toolName,
  parameters}``, whose values are strings, JSON-decoded where they hold JSON).
* ``tool_result`` (``PostToolUse``) -> PostToolUse (PostToolUseFailure with ``error`` when
  the result is an error): ``tool_result{name, input, output}`` fills ``tool_response``.
* ``prompt_submit`` (``UserPromptSubmit``) -> UserPromptSubmit, ``userPromptSubmit.prompt``
  as ``prompt``.
* ``agent_start`` / ``agent_resume`` (``TaskStart`` / ``TaskResume``) -> SessionStart with
  ``source`` ``startup`` / ``resume``.
* ``agent_end`` (``TaskComplete``) -> Stop (``turn.outputText`` as ``last_assistant_message``,
  ``stop_hook_active`` false); ``agent_error`` (``TaskError``) -> StopFailure with ``error``;
  ``session_shutdown`` (``SessionShutdown``) -> SessionEnd; ``pre_compact`` -> PreCompact;
  ``agent_abort`` (``TaskCancel``) has no Claude Code equivalent and passes through as
  ``TaskCancel`` (recorded, never decided).

Tools become Claude Code's, the original kept as ``agent_tool_name``; relative paths are made
absolute against ``cwd``. The SDK's ``run_commands`` (``{"commands": [...]}``) and the legacy
``execute_command`` -> Bash; Cline runs each of the commands on its own, so they are joined by
newlines into ``command`` only when each reads on its own and the joined text reads as exactly
their commands (:func:`bus.dialects.shellinput.joined_commands`): an entry that opens a
here-document or a quote cannot hide the next ones; such a list cannot be judged.
``read_files`` (``files[{path, ...}]``) and ``read_file`` -> Read with ``file_path`` (the first)
and ``file_paths`` (every one, each judged by path rules).
``editor`` -> Edit (``path``, ``old_text``, ``new_text`` -> ``file_path``, ``old_string``,
``new_string``), or Write with ``content`` when it has neither ``old_text`` nor
``insert_line`` (it creates the file); ``write_to_file`` -> Write, ``replace_in_file`` -> Edit;
``apply_patch`` -> Write or Edit from the patch's file headers (``file_paths`` lists every
file). ``search_codebase`` / ``search_files`` -> Grep (the first query as ``pattern``),
``list_files`` -> LS, ``fetch_web_content`` / ``web_fetch`` -> WebFetch (the first request's
``url`` and ``prompt``), ``web_search`` -> WebSearch, ``ask_question`` /
``ask_followup_question`` -> AskUserQuestion, ``spawn_agent`` / ``new_task`` -> Task,
``skills`` -> Skill. MCP tools, ``<server>__<tool>`` in the SDK and ``use_mcp_tool`` (its
``arguments`` decoded as the input) in the legacy format, become ``mcp__<server>__<tool>``.

Output, in the fields Cline reads: ``cancel``, ``errorMessage`` (only with ``cancel``: alone
Cline adds it to the model's context), ``context`` and ``overrideInput``. Cline cannot deny a
single call: ``cancel: true`` aborts the whole task, and a file hook cannot skip the call.
Event by event:

* PreToolUse: deny of a shell call -> ``overrideInput`` replacing the commands with one that
  prints "hookbus denied this command: <reason>" on stderr and exits 1 (the original never
  runs; the model reads the reason as the command's error) plus the reason as ``context``.
  Deny of any other tool -> ``cancel: true`` + ``errorMessage``: the task stops before the
  call runs. ``ask`` is denied the same way, the reason saying Cline cannot ask. ``allow``
  and ``defer`` send nothing (Cline has no allow answer). ``updatedInput`` ->
  ``overrideInput``, the whole input under Cline's names, for ``run_commands``,
  ``execute_command``, ``editor`` and ``read_files``; a rewrite of another tool is denied
  (running the original would not be what the policy asked). ``additionalContext`` ->
  ``context`` (Cline adds it to the next request as ``<hook_context source="PreToolUse">``).
* PostToolUse / PostToolUseFailure: ``additionalContext`` and a ``decision: "block"``
  reason -> ``context`` (the call has run; Claude Code too only tells the model).
* ``continue: false`` -> ``cancel: true`` with ``stopReason`` as ``errorMessage`` (the task
  stops) on those events.
* UserPromptSubmit, SessionStart, Stop, StopFailure, SessionEnd: Cline runs these hooks
  detached and never reads their answer, so nothing is sent (a Stop block or added context
  cannot happen; the record keeps what the policy decided).
"""

from __future__ import annotations

import json
import posixpath
import shlex
from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, no, partial
from bus.dialects.codex import patch_input
from bus.dialects.shellinput import joined_commands

CLINE: Final = "cline"
#: Cline's SDK hook names (``hookName``) -> Claude Code's events.
CLINE_EVENTS: Final[dict[str, str]] = {
    "tool_call": "PreToolUse",
    "tool_result": "PostToolUse",
    "prompt_submit": "UserPromptSubmit",
    "agent_start": "SessionStart",
    "agent_resume": "SessionStart",
    "agent_end": "Stop",
    "agent_error": "StopFailure",
    "agent_abort": "TaskCancel",
    "pre_compact": "PreCompact",
    "session_shutdown": "SessionEnd",
}
#: Cline's hook file names -> its SDK hook names (PreCompact's file is found but never run).
HOOK_FILES: Final[dict[str, str]] = {
    "PreToolUse": "tool_call",
    "PostToolUse": "tool_result",
    "UserPromptSubmit": "prompt_submit",
    "TaskStart": "agent_start",
    "TaskResume": "agent_resume",
    "TaskComplete": "agent_end",
    "TaskError": "agent_error",
    "TaskCancel": "agent_abort",
    "SessionShutdown": "session_shutdown",
}
#: Cline's tool names (SDK and legacy) -> Claude Code's (``editor`` and ``apply_patch`` may be Write).
CLINE_TOOLS: Final[dict[str, str]] = {
    "run_commands": "Bash",
    "execute_command": "Bash",
    "read_files": "Read",
    "read_file": "Read",
    "editor": "Edit",
    "write_to_file": "Write",
    "replace_in_file": "Edit",
    "apply_patch": "Edit",
    "search_codebase": "Grep",
    "search_files": "Grep",
    "list_files": "LS",
    "fetch_web_content": "WebFetch",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
    "ask_question": "AskUserQuestion",
    "ask_followup_question": "AskUserQuestion",
    "spawn_agent": "Task",
    "new_task": "Task",
    "skills": "Skill",
    "access_mcp_resource": "ReadMcpResourceTool",
}
SHELL_TOOLS: Final = frozenset({"run_commands", "execute_command"})
#: Tools whose rewritten input hookbus can give back under Cline's names.
REWRITABLE: Final = frozenset({"run_commands", "execute_command", "editor", "read_files"})
DEFAULT_DENY_REASON: Final = "Denied by hookbus policy"
ASK_SUFFIX: Final = " (hookbus policy asks for confirmation, which Cline cannot do: denied instead)"
_FILE_TOOLS: Final = frozenset({"Read", "Write", "Edit"})
_SOURCES: Final = {"agent_start": "startup", "agent_resume": "resume"}
_TOOL_EVENTS: Final = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})


def _absolute(path: str, cwd: object) -> str:
    if path.startswith("/") or not isinstance(cwd, str) or not cwd:
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd, path))


def command_text(entry: object) -> str:
    """One entry of ``run_commands``' ``commands`` as a shell line (a string, or ``{command, args}``)."""
    if isinstance(entry, dict):
        given = entry.get("args")
        args: list[Any] = given if isinstance(given, list) else []
        return " ".join([str(entry.get("command", "")), *(shlex.quote(str(arg)) for arg in args)])
    return str(entry)


def _decoded(parameters: dict[str, Any]) -> dict[str, Any]:
    """``preToolUse.parameters`` (strings, non-strings JSON-encoded by Cline) decoded back."""
    out: dict[str, Any] = {}
    for key, value in parameters.items():
        if isinstance(value, str) and value[:1] in ("[", "{"):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        out[key] = value
    return out


def canonical_tool_call(name: str, tool_input: dict[str, Any], cwd: object) -> tuple[str, dict[str, Any]]:
    """``(Claude Code tool name, tool_input)`` of Cline's tool ``name`` called with ``tool_input``."""
    out = dict(tool_input)
    if name == "use_mcp_tool" and isinstance(out.get("server_name"), str) and isinstance(out.get("tool_name"), str):
        arguments = out.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {"arguments": arguments}
        return f"mcp__{out['server_name']}__{out['tool_name']}", arguments if isinstance(arguments, dict) else {}
    if name not in CLINE_TOOLS:
        server, sep, tool = name.partition("__")
        if sep and server and tool and not name.startswith("mcp__"):
            return f"mcp__{server}__{tool}", out
        return name, out
    canonical = CLINE_TOOLS[name]
    if name == "run_commands":
        given = out.get("commands")
        commands: list[Any] = given if isinstance(given, list) else [] if given is None else [given]
        out["command"] = joined_commands([command_text(entry) for entry in commands])
    elif name == "apply_patch":
        return patch_input(out, cwd)
    elif name == "read_files":
        listed = out.get("files")
        files: list[Any] = listed if isinstance(listed, list) else []
        paths = [f.get("path") if isinstance(f, dict) else f for f in files]
        paths = [_absolute(p, cwd) for p in paths if isinstance(p, str) and p]
        if paths:
            out["file_path"], out["file_paths"] = paths[0], paths
    elif name == "editor":
        if out.get("old_text") is None and out.get("insert_line") is None:
            canonical = "Write"
            out["content"] = out.get("new_text", "")
        else:
            out["old_string"] = out.get("old_text") or ""
            out["new_string"] = out.get("new_text", "")
    elif name in ("search_codebase", "search_files"):
        queries = out.get("queries")
        first = queries[0] if isinstance(queries, list) and queries else queries if isinstance(queries, str) else None
        pattern = out.get("regex") if name == "search_files" else first
        if isinstance(pattern, str):
            out["pattern"] = pattern
        if name == "search_files" and isinstance(out.get("file_pattern"), str):
            out["glob"] = out["file_pattern"]
    elif name == "fetch_web_content":
        requests = out.get("requests")
        first = requests[0] if isinstance(requests, list) and requests and isinstance(requests[0], dict) else {}
        for key in ("url", "prompt"):
            if isinstance(first.get(key), str):
                out[key] = first[key]
    elif name in ("ask_question", "ask_followup_question") and "question" in out:
        out.setdefault("questions", [{"question": out["question"]}])
    path = out.get("path")
    if isinstance(path, str) and path:
        if canonical in _FILE_TOOLS:
            out.setdefault("file_path", _absolute(path, cwd))
        elif canonical in ("Grep", "LS"):
            out["path"] = _absolute(path, cwd)
    return canonical, out


def cline_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Cline hook input in Claude Code's shape (a new dict; Cline's fields kept)."""
    out = dict(hook_input)
    hook = out.get("hookName")
    if isinstance(hook, str) and hook in CLINE_EVENTS:
        out["hook_event_name"] = CLINE_EVENTS[hook]
        out[AGENT_EVENT_NAME] = hook
    elif isinstance(hook, str) and hook in HOOK_FILES:  # a file name sent as the event (older Cline)
        return cline_input({**out, "hookName": HOOK_FILES[hook]})
    if "session_id" not in out and isinstance(out.get("taskId"), str) and out["taskId"]:
        out["session_id"] = out["taskId"]
    roots = out.get("workspaceRoots")
    info = out.get("workspaceInfo")
    if "cwd" not in out:
        if isinstance(roots, list) and roots and isinstance(roots[0], str):
            out["cwd"] = roots[0]
        elif isinstance(info, dict) and isinstance(info.get("rootPath"), str):
            out["cwd"] = info["rootPath"]
    call = out.get("tool_call") if hook == "tool_call" else out.get("tool_result") if hook == "tool_result" else None
    legacy = out.get("preToolUse") if hook == "tool_call" else out.get("postToolUse")
    name: Any = None
    tool_input: Any = None
    if isinstance(call, dict):
        name, tool_input = call.get("name"), call.get("input")
        if isinstance(call.get("id"), str):
            out["tool_use_id"] = call["id"]
    if not isinstance(name, str) and isinstance(legacy, dict):
        name = legacy.get("toolName")
        if isinstance(legacy.get("parameters"), dict):
            tool_input = _decoded(legacy["parameters"])
    if isinstance(name, str) and name:
        out[AGENT_TOOL_NAME] = name
        out["tool_name"], out["tool_input"] = canonical_tool_call(
            name, tool_input if isinstance(tool_input, dict) else {}, out.get("cwd")
        )
    if hook == "tool_result":
        result = call if isinstance(call, dict) else {}
        legacy = legacy if isinstance(legacy, dict) else {}
        out["tool_response"] = result.get("output", legacy.get("result"))
        if result.get("error") or legacy.get("success") is False:
            out["hook_event_name"] = "PostToolUseFailure"
            out.setdefault("error", str(result.get("error") or legacy.get("result") or "the tool failed"))
    elif hook == "prompt_submit":
        submitted = out.get("userPromptSubmit")
        if isinstance(submitted, dict) and isinstance(submitted.get("prompt"), str):
            out.setdefault("prompt", submitted["prompt"])
    elif hook in _SOURCES:
        out.setdefault("source", _SOURCES[hook])
    elif hook == "agent_end":
        turn = out.get("turn")
        if isinstance(turn, dict) and isinstance(turn.get("outputText"), str):
            out.setdefault("last_assistant_message", turn["outputText"])
        out.setdefault("stop_hook_active", False)
    elif hook == "agent_error":
        error = out.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        out["error"] = message if isinstance(message, str) else str(message)
    return out


def denied_command(reason: str) -> str:
    """The shell line that replaces a denied command: it says why on stderr and fails."""
    return f"printf '%s\\n' {shlex.quote(f'hookbus denied this command: {reason}')} >&2; exit 1"


def _agent_tool(agent_input: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    call = agent_input.get("tool_call")
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        given = call.get("input")
        return str(call["name"]), given if isinstance(given, dict) else {}
    legacy = agent_input.get("preToolUse")
    if isinstance(legacy, dict) and isinstance(legacy.get("toolName"), str):
        parameters = legacy.get("parameters")
        return legacy["toolName"], _decoded(parameters) if isinstance(parameters, dict) else {}
    return "", {}


def _deny(reason: str, agent_input: dict[str, Any]) -> dict[str, Any]:
    tool, _ = _agent_tool(agent_input)
    if tool == "run_commands":
        return {
            "overrideInput": {"commands": [denied_command(reason)]},
            "context": f"hookbus denied the call: {reason}",
        }
    if tool == "execute_command":
        return {"overrideInput": {"command": denied_command(reason)}, "context": f"hookbus denied the call: {reason}"}
    return {"cancel": True, "errorMessage": f"hookbus denied {tool or 'the tool call'}: {reason}"}


def agent_tool_input(updated: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any] | None:
    """A rewritten (canonical) tool input under Cline's names, or None when hookbus cannot give it back."""
    tool, before = _agent_tool(agent_input)
    if tool not in REWRITABLE:
        return None
    out = dict(before)
    if tool == "run_commands":
        if not isinstance(updated.get("command"), str):
            return None
        cwd = agent_input.get("workspaceRoots")
        original = canonical_tool_call(tool, before, cwd[0] if isinstance(cwd, list) and cwd else None)[1]
        if updated["command"] != original.get("command"):
            out["commands"] = [updated["command"]]
        return out
    if tool == "execute_command":
        return {**out, "command": updated["command"]} if isinstance(updated.get("command"), str) else None
    if tool == "read_files":
        if not isinstance(updated.get("file_path"), str):
            return None
        listed = before.get("files")
        files: list[Any] = listed if isinstance(listed, list) else []
        first = dict(files[0]) if files and isinstance(files[0], dict) else {}
        first["path"] = updated["file_path"]
        out["files"] = [first, *files[1:]]
        return out
    for claude_key, cline_key in (("file_path", "path"), ("old_string", "old_text"), ("new_string", "new_text")):
        if claude_key in updated:
            out[cline_key] = updated[claude_key]
    if "content" in updated and updated.get("old_string") is None:
        out["new_text"] = updated["content"]
    return out


def cline_output(event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` as Cline reads it (see the module docstring)."""
    if event not in _TOOL_EVENTS:
        return {}  # Cline runs these hooks detached and reads no answer
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = specific.get("additionalContext") if isinstance(specific.get("additionalContext"), str) else ""
    if output.get("continue") is False:
        reason = output.get("stopReason") or output.get("reason") or "Stopped by hookbus policy"
        return {"cancel": True, "errorMessage": str(reason)}
    out: dict[str, Any] = {}
    if event == "PreToolUse":
        decision = specific.get("permissionDecision")
        if decision is None and output.get("decision") in ("block", "approve"):
            decision = "deny" if output["decision"] == "block" else "allow"
        reason = str(specific.get("permissionDecisionReason") or output.get("reason") or DEFAULT_DENY_REASON)
        if decision in ("deny", "ask"):
            return _deny(reason + ASK_SUFFIX if decision == "ask" else reason, agent_input)
        updated = specific.get("updatedInput")
        if decision != "defer" and isinstance(updated, dict):
            rewritten = agent_tool_input(updated, agent_input)
            if rewritten is None:
                tool, _ = _agent_tool(agent_input)
                return _deny(
                    f"hookbus policy rewrites this call, which hookbus cannot do for Cline's {tool}", agent_input
                )
            out["overrideInput"] = rewritten
    elif output.get("decision") == "block":
        block = str(output.get("reason") or "Blocked by hookbus policy")
        context = f"{block}\n{context}" if context else block
    if context:
        out["context"] = context
    return out


class Cline(Dialect):
    """Cline's hook format (see the module docstring)."""

    name = CLINE
    title = "Cline"
    capabilities = {
        "deny": partial(
            "a shell call (`run_commands`) is replaced by one that prints the reason and exits 1, so the "
            "model reads why; any other tool gets `cancel: true`, which stops the whole task before the call "
            "runs (a file hook cannot skip one call)"
        ),
        "ask": no("Cline cannot ask from a hook: denied as above, the reason saying so"),
        "allow": no("Cline has no allow answer: nothing is sent and Cline's own approval settings apply"),
        "rewrite_input": partial(
            "`overrideInput` with the whole input under Cline's names for `run_commands`, `editor` and "
            "`read_files`; a rewrite of another tool is denied"
        ),
        "stop_block": no("TaskComplete runs detached and Cline reads no answer: the block is only recorded"),
        "add_context": partial(
            "PreToolUse and PostToolUse `context` (added to the next request as `<hook_context>`); "
            "TaskStart and UserPromptSubmit run detached (the CLI sends no UserPromptSubmit headless)"
        ),
        "fail_closed": partial(
            "Cline ignores exit codes; `hookbus install cline --fail-closed` makes the PreToolUse script "
            "print `cancel: true` when the gateway cannot answer, which stops the task before the call"
        ),
    }
    events = CLINE_EVENTS
    tools = CLINE_TOOLS
    transport = "command"
    verified = "real CLI: cline 3.0.65 (@cline/core 0.0.86), headless, in the test suite"

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return cline_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return cline_output(event, output, agent_input)

    def canonical_tool(self, name: str) -> str:
        return CLINE_TOOLS.get(name) or canonical_tool_call(name, {}, None)[0]


__all__ = [
    "CLINE",
    "CLINE_EVENTS",
    "CLINE_TOOLS",
    "HOOK_FILES",
    "Cline",
    "agent_tool_input",
    "canonical_tool_call",
    "cline_input",
    "cline_output",
    "command_text",
    "denied_command",
]
