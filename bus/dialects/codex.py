"""Codex CLI's dialect (``codex``, OpenAI's ``codex``; command hooks through ``hookbus hook``).

Codex's events, their names and its input fields are Claude Code's already (snake_case,
``permission_mode`` from Claude Code's set, plus ``turn_id``, kept). Input: the shell tool
arrives as ``Bash`` with ``{"command": ...}``; older and other shell names (``shell``,
``exec_command``, ``local_shell``, ``shell_command``, ``unified_exec``) become ``Bash`` too, a
``cmd`` field becoming ``command``; an argv list becomes the script when it runs a shell with
``-c`` (``["bash", "-lc", SCRIPT]``), else the argv joined with shell quoting
(:mod:`bus.dialects.shellinput`). ``write_stdin`` (keystrokes to a running session) becomes
``Bash`` whose ``command`` is the lines its ``chars`` type. ``apply_patch`` (``{"command":
<patch>}``) becomes a file tool from the patch's headers (``*** Add File`` / ``*** Update
File`` / ``*** Delete File`` / ``*** Move to``), paths made absolute against ``cwd``: ``Write``
with ``file_path`` and ``content`` when the patch creates, deletes or moves a file (a deletion
writes nothing), else ``Edit`` with ``file_path``, ``old_string`` and ``new_string`` (of its
first file). ``file_paths`` lists every file the patch touches, and permission rules judge each
of them (a ``deny`` on any one applies, an ``allow`` needs all), so a patch that touches a
second file is no way around a path rule. A shell command that only runs ``apply_patch`` (a
heredoc or the patch as its argument, after an optional ``cd DIR &&``, with nothing in it the
shell would expand: Codex applies those itself, and sends them to hooks as ``Bash``) is read the
same way, its ``command`` kept; anything else stays ``Bash``.
``view_image`` becomes ``Read`` with ``file_path``.
MCP tools keep their ``mcp__server__tool`` names. The agent's tool name is kept in
``agent_tool_name``; every other field is kept as sent. Codex has no failure event, and its
PostToolUse carries no exit code; ``hookbus hook`` adds the shell command's exit code as
``hookbus_exit_code``, read from the session's rollout (:mod:`hookbus.shim_codex`), and a
PostToolUse with a non-zero one becomes PostToolUseFailure with ``error: "Exit code: N"``
(``agent_event_name`` keeps ``PostToolUse``; its reply is a PostToolUse reply).

Output, exactly what Codex's parser accepts (its output schemas are all
``additionalProperties: false``, and a reply it rejects is a *failed* hook: Codex then runs
the tool as if there were no hook). ``suppressOutput`` is never sent (three events reject it);
null values never. Event by event:

* PreToolUse: ``hookSpecificOutput`` only (plus ``systemMessage``). ``deny`` ->
  ``permissionDecision: deny`` with a reason (Codex rejects a deny without one); Claude Code's
  legacy ``decision: block`` likewise. ``ask`` -> a deny whose reason says Codex cannot ask.
  ``continue: false`` (rejected here) -> a deny with the stop reason. ``allow`` (rejected
  without ``updatedInput``) and ``defer`` -> no decision at all. A rewrite -> ``allow`` +
  ``updatedInput: {"command": ...}``, the only rewrite Codex carries out; a rewrite of any
  other field (an apply_patch's files, an MCP tool's arguments) becomes a deny saying so.
  ``additionalContext`` is kept.
* PermissionRequest: ``decision.behavior`` ``allow`` / ``deny`` + ``message``; ``interrupt``,
  ``updatedPermissions`` (dropped: the allow holds once) and ``updatedInput`` (a deny saying
  so) are rejected by Codex; ``continue: false`` becomes a deny. ``systemMessage`` only besides.
* PostToolUse: ``decision: block`` + ``reason``, ``additionalContext``, and
  ``updatedMCPToolOutput`` for MCP tools only.
* UserPromptSubmit: ``decision: block`` + ``reason``, ``additionalContext``.
* Stop / SubagentStop: ``decision: block`` + ``reason`` (the reason becomes the next prompt);
  ``additionalContext`` without a block becomes that block, as it continues Claude Code's turn.
* SessionStart / SubagentStart: ``additionalContext``. PreCompact / PostCompact: the universal
  fields only (a block of compaction has no form in Codex and is dropped).
* PostToolUse, UserPromptSubmit, Stop, SubagentStop, SessionStart, SubagentStart, PreCompact and
  PostCompact also take ``continue: false`` + ``stopReason`` and ``systemMessage``. Interrupt
  takes ``systemMessage`` only; SessionEnd and any other event get ``{}``.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, no, partial, yes
from bus.dialects.shellinput import argv_command, keystrokes_input

CODEX: Final = "codex"
PATCH_TOOL: Final = "apply_patch"
#: Codex's shell tool names, all ``Bash`` inside hookbus.
SHELL_NAMES: Final = frozenset({"Bash", "shell", "exec_command", "local_shell", "shell_command", "unified_exec"})
#: Codex's tool that types into a running shell session (``chars``).
STDIN_TOOL: Final = "write_stdin"
#: A shell command's exit code, which ``hookbus hook`` adds to a PostToolUse from Codex's rollout.
EXIT_CODE_FIELD: Final = "hookbus_exit_code"
DEFAULT_DENY_REASON: Final = "Denied by hookbus policy"
ASK_SUFFIX: Final = " (hookbus policy asks for confirmation, which Codex cannot do: denied instead)"
_PATCH_HEADER: Final = re.compile(r"\*\*\* (Add|Update|Delete) File: (.+)")
_PATCH_MOVE: Final = re.compile(r"\*\*\* Move to: (.+)")
#: The first line of ``[cd DIR &&] apply_patch <<'EOF'`` (the heredoc's end is found without a regex).
_SHELL_PATCH: Final = re.compile(
    r"(?:cd\s+([\w./-]+)\s*&&\s*)?(?:apply_patch|applypatch)\s+<<-?\s*(['\"]?)(\w+)\2[ \t]*"
)
#: Events whose reply may carry ``continue``/``stopReason`` (Codex rejects them elsewhere).
_STOPPABLE: Final = frozenset(
    {
        "PostToolUse",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
        "SessionStart",
        "SubagentStart",
        "PreCompact",
        "PostCompact",
    }
)
_CONTEXT_EVENTS: Final = frozenset({"PostToolUse", "UserPromptSubmit", "SessionStart", "SubagentStart"})
_BLOCK_EVENTS: Final = frozenset({"PostToolUse", "UserPromptSubmit", "Stop", "SubagentStop"})


@dataclass
class PatchFile:
    """One file an ``apply_patch`` patch touches."""

    kind: str  # "add", "update" or "delete"
    path: str
    move_to: str | None = None
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)


def parse_patch(patch: str) -> list[PatchFile]:
    """The files of a Codex ``apply_patch`` patch, in order (headers matched after trimming the line,
    so an indented one still counts: a path more is judged, never one less)."""
    files: list[PatchFile] = []
    current: PatchFile | None = None
    for line in patch.splitlines():
        stripped = line.strip()
        if header := _PATCH_HEADER.fullmatch(stripped):
            current = PatchFile(header.group(1).lower(), header.group(2).strip())
            files.append(current)
        elif current is None or stripped.startswith(("***", "@@")):
            if current is not None and (move := _PATCH_MOVE.fullmatch(stripped)):
                current.move_to = move.group(1).strip()
        elif line.startswith("+"):
            current.new_lines.append(line[1:])
        elif line.startswith("-"):
            current.old_lines.append(line[1:])
        elif current.kind == "update":  # a context line is on both sides
            current.old_lines.append(line[1:])
            current.new_lines.append(line[1:])
    return files


def _absolute(path: str, cwd: object) -> str:
    if path.startswith("/") or not isinstance(cwd, str) or not cwd:
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd, path))


def patch_input(tool_input: dict[str, Any], cwd: object) -> tuple[str, dict[str, Any]]:
    """``(canonical tool, tool_input)`` of an ``apply_patch`` call (see the module docstring)."""
    patch = tool_input.get("command")
    if not isinstance(patch, str) and isinstance(tool_input.get("input"), str):
        patch = tool_input["input"]
    files = parse_patch(patch) if isinstance(patch, str) else []
    if not files:
        return "Edit", dict(tool_input)
    paths = list(dict.fromkeys(_absolute(p, cwd) for f in files for p in (f.path, f.move_to) if p))
    first = files[0]
    out = dict(tool_input)
    out["file_path"] = paths[0]
    out["file_paths"] = paths
    if any(f.kind != "update" or f.move_to for f in files):
        text = "\n".join(first.new_lines)
        out["content"] = text + "\n" if first.new_lines else ""
        return "Write", out
    out["old_string"] = "\n".join(first.old_lines)
    out["new_string"] = "\n".join(first.new_lines)
    return "Edit", out


def shell_patch(command: str) -> tuple[str, str | None] | None:
    """``(patch, folder it is applied in or None)`` when ``command`` only runs Codex's
    ``apply_patch`` (a heredoc, or the patch as its one argument, after an optional ``cd X &&``),
    which Codex applies itself, as it does the apply_patch tool."""
    if "apply_patch" not in command and "applypatch" not in command:
        return None
    first, newline, rest = command.strip().partition("\n")
    if newline and (heredoc := _SHELL_PATCH.fullmatch(first)):
        lines, end = rest.split("\n"), heredoc.group(3)
        # A line that ends the heredoc early would leave the rest to the shell: that stays Bash.
        if lines[-1].strip() != end or any(line.strip() == end for line in lines[:-1]):
            return None
        body = "\n".join(lines[:-1])
        # Unquoted, the shell would expand $(...) and `...` in it: only the quoted form is read.
        return None if not heredoc.group(2) and ("$" in body or "`" in body) else (body, heredoc.group(1))
    if "$" in command or "`" in command:
        return None  # an expansion in the argument: the shell decides what runs
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    folder = None
    if len(argv) >= 3 and argv[0] == "cd" and argv[2] == "&&" and re.fullmatch(r"[\w./-]+", argv[1]):
        folder, argv = argv[1], argv[3:]
    if len(argv) == 2 and argv[0] in ("apply_patch", "applypatch") and "*** Begin Patch" in argv[1]:
        return argv[1], folder
    return None


def codex_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Codex hook input in Claude Code's shape (a new dict when a tool is named; extras kept)."""
    tool = hook_input.get("tool_name")
    if not isinstance(tool, str):
        return hook_input
    out = dict(hook_input)
    out[AGENT_TOOL_NAME] = tool
    code = out.get(EXIT_CODE_FIELD)
    if out.get("hook_event_name") == "PostToolUse" and type(code) is int and code != 0:
        out["hook_event_name"], out[AGENT_EVENT_NAME] = "PostToolUseFailure", "PostToolUse"
        out.setdefault("error", f"Exit code: {code}")
    tool_input = out.get("tool_input")
    if tool in SHELL_NAMES:
        out["tool_name"] = "Bash"
        if isinstance(tool_input, dict):
            shell = dict(tool_input)
            command = shell.get("command", shell.get("cmd"))
            if isinstance(command, list) and all(isinstance(arg, str) for arg in command):
                command = argv_command(command)
            elif command is not None and not isinstance(command, str):
                raise ValueError(f"{tool}'s command is neither a string nor an argv of strings")
            if isinstance(command, str):
                shell["command"] = command
            out["tool_input"] = shell
            if isinstance(command, str) and (found := shell_patch(command)) is not None:
                cwd = out.get("cwd")
                folder = _absolute(found[1], cwd) if found[1] else cwd
                out["tool_name"], out["tool_input"] = patch_input({**shell, "command": found[0]}, folder)
                out["tool_input"]["command"] = command
    elif tool == STDIN_TOOL:
        out["tool_name"], out["tool_input"] = "Bash", keystrokes_input(tool_input, "chars")
    elif tool == PATCH_TOOL and isinstance(tool_input, dict):
        out["tool_name"], out["tool_input"] = patch_input(tool_input, out.get("cwd"))
    elif tool == PATCH_TOOL:
        out["tool_name"] = "Edit"
    elif tool == "view_image" and isinstance(tool_input, dict):
        out["tool_name"] = "Read"
        if isinstance(tool_input.get("path"), str):
            out["tool_input"] = {**tool_input, "file_path": _absolute(tool_input["path"], out.get("cwd"))}
    return out


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _rewrite(updated: dict[str, Any], agent_input: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``(updatedInput for Codex, None)``, ``(None, None)`` for no change, or ``(None, why not)``."""
    original = codex_input(agent_input).get("tool_input")
    original = original if isinstance(original, dict) else {}
    changed = {key for key, value in updated.items() if value != original.get(key)}  # absent keys: as they were
    if not changed:
        return None, None
    if (
        changed == {"command"}
        and isinstance(updated.get("command"), str)
        and agent_input.get("tool_name") != STDIN_TOOL
    ):
        return {"command": updated["command"]}, None
    tool = agent_input.get("tool_name")
    fields = ", ".join(sorted(changed - {"command"}) or ["command"])
    return None, f"hookbus policy rewrote {tool}'s {fields}, which Codex cannot change: denied instead"


def _pre_tool_use(output: dict[str, Any], specific: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    decision = specific.get("permissionDecision")
    reason = _text(specific.get("permissionDecisionReason"))
    if output.get("decision") == "block":
        decision, reason = "deny", reason or _text(output.get("reason"))
    if output.get("continue") is False and decision != "deny":
        decision, reason = "deny", _text(output.get("stopReason")) or reason
    if decision == "ask":
        decision, reason = "deny", (reason or "") + ASK_SUFFIX
    fields: dict[str, Any] = {}
    updated = specific.get("updatedInput")
    if decision != "deny" and isinstance(updated, dict):
        new_input, refused = _rewrite(updated, agent_input)
        if refused:
            decision, reason = "deny", refused
        elif new_input is not None:
            fields = {"permissionDecision": "allow", "updatedInput": new_input}
    if decision == "deny":
        fields = {"permissionDecision": "deny", "permissionDecisionReason": (reason or DEFAULT_DENY_REASON).strip()}
    if context := _text(specific.get("additionalContext")):
        fields["additionalContext"] = context
    out = {"systemMessage": output["systemMessage"]} if _text(output.get("systemMessage")) else {}
    if fields:
        out["hookSpecificOutput"] = {"hookEventName": "PreToolUse", **fields}
    return out


def _permission_request(
    output: dict[str, Any], specific: dict[str, Any], agent_input: dict[str, Any]
) -> dict[str, Any]:
    request = specific.get("decision")
    request = request if isinstance(request, dict) else {}
    behavior, message = request.get("behavior"), _text(request.get("message"))
    if behavior == "allow" and isinstance(request.get("updatedInput"), dict):
        new_input, refused = _rewrite(request["updatedInput"], agent_input)
        if new_input is not None or refused:
            behavior, message = "deny", refused or "hookbus policy rewrote the input, which Codex cannot do here"
    if output.get("continue") is False:
        behavior, message = "deny", _text(output.get("stopReason")) or message
    out = {"systemMessage": output["systemMessage"]} if _text(output.get("systemMessage")) else {}
    if behavior in ("allow", "deny"):
        answer: dict[str, Any] = {"behavior": behavior}
        if behavior == "deny":
            answer["message"] = message or DEFAULT_DENY_REASON
        elif message:
            answer["message"] = message
        out["hookSpecificOutput"] = {"hookEventName": "PermissionRequest", "decision": answer}
    return out


def codex_output(event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output in the form Codex accepts for ``event`` (see the module docstring)."""
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    if event == "PreToolUse":
        return _pre_tool_use(output, specific, agent_input)
    if event == "PermissionRequest":
        return _permission_request(output, specific, agent_input)
    if event == "Interrupt":
        return {"systemMessage": output["systemMessage"]} if _text(output.get("systemMessage")) else {}
    if event not in _STOPPABLE:
        return {}
    out: dict[str, Any] = {}
    if output.get("continue") is False:
        out["continue"] = False
        if stop := _text(output.get("stopReason")):
            out["stopReason"] = stop
    if message := _text(output.get("systemMessage")):
        out["systemMessage"] = message
    context = _text(specific.get("additionalContext"))
    if event in _BLOCK_EVENTS and output.get("decision") == "block":
        out["decision"], out["reason"] = "block", _text(output.get("reason")) or context or DEFAULT_DENY_REASON
    elif event in ("Stop", "SubagentStop") and context:
        out["decision"], out["reason"] = "block", context
    fields: dict[str, Any] = {}
    if event in _CONTEXT_EVENTS and context:
        fields["additionalContext"] = context
    agent_tool = agent_input.get("tool_name")
    mcp_output = specific.get("updatedMCPToolOutput")
    if event == "PostToolUse" and mcp_output is not None and str(agent_tool).startswith("mcp__"):
        fields["updatedMCPToolOutput"] = mcp_output
    if fields:
        out["hookSpecificOutput"] = {"hookEventName": event, **fields}
    return out


class CodexCli(Dialect):
    """Codex CLI's hook format (see the module docstring)."""

    name = CODEX
    title = "Codex CLI"
    transport = "command"
    verified = "real CLI: @openai/codex 0.171.0, headless, in the test suite"
    capabilities = {
        "deny": yes("`permissionDecision: deny` with a reason (hookbus supplies one when the policy gave none)"),
        "ask": no("Codex rejects `ask`: hookbus sends a deny whose reason says Codex cannot ask"),
        "allow": partial(
            "Codex rejects a bare PreToolUse `allow`: hookbus sends no decision, so Codex's own approval "
            "rules apply; PermissionRequest `behavior: allow` approves"
        ),
        "rewrite_input": partial(
            "the shell command only (`allow` + `updatedInput: {command}`); a rewrite of an apply_patch's "
            "files, an MCP tool's arguments or any other field becomes a deny that says so"
        ),
        "stop_block": yes("Stop / SubagentStop `decision: block`: the reason becomes the next prompt"),
        "add_context": partial(
            "SessionStart, SubagentStart, UserPromptSubmit, PreToolUse and PostToolUse (as developer messages); "
            "on Stop it becomes a block with the context as the prompt; other events drop it"
        ),
        "fail_closed": partial(
            "`hookbus hook --fail-closed` exits 2, which blocks PreToolUse, PermissionRequest and "
            "UserPromptSubmit; `hookbus install codex --fail-closed` sets it on those events only"
        ),
    }
    tools = {name: "Bash" for name in SHELL_NAMES} | {STDIN_TOOL: "Bash", PATCH_TOOL: "Edit", "view_image": "Read"}

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return codex_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        # A failed shell command is Codex's PostToolUse: it gets that event's reply.
        return codex_output("PostToolUse" if event == "PostToolUseFailure" else event, output, agent_input)


__all__ = [
    "CODEX",
    "EXIT_CODE_FIELD",
    "PATCH_TOOL",
    "SHELL_NAMES",
    "STDIN_TOOL",
    "CodexCli",
    "PatchFile",
    "codex_input",
    "codex_output",
    "parse_patch",
]
