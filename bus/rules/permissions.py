"""Claude Code permission rules (``Tool`` / ``Tool(specifier)``), as used by ``if`` and ``rule``.

A handler's ``if`` field holds one rule in the syntax of Claude Code's ``permissions`` lists;
hookbus's ``rule`` handlers use the same syntax for their allow/deny lists.
:func:`parse_rule` reads a rule and :func:`rule_matches` tests it against one tool call:

* **Tool part**: the exact tool name; ``mcp__server`` and ``mcp__server__*`` cover a server,
  ``*`` is a wildcard (``mcp__*``). ``Edit`` covers Write, MultiEdit and NotebookEdit, ``Read``
  covers Grep, Glob and LS; ``Task`` is ``Agent``. A rule without a specifier matches any call.
* **Bash / PowerShell**: any subcommand (see :mod:`bus.rules.bashsplit`), also with wrappers such as
  ``timeout 30`` removed; a deny, ask or ``if`` rule meets any of its readings (the commands it
  runs: ``sudo rm`` runs ``rm``, ``sh -c 'rm'`` runs ``rm``, see :mod:`bus.rules.readings`), an
  allow rule must match them all. ``*`` matches any text; a trailing `` *`` (or legacy ``:*``) also
  matches the bare prefix (``ls *`` matches ``ls``, not ``lsof``); no ``*``: exact match.
  PowerShell ignores case and knows the common aliases.
* **File tools**: gitignore globs anchored at ``//`` (root), ``~/`` (home) or the working
  directory (``/x``, ``./x``, ``x/y``); a pattern without a slash matches at any depth below it.
  An edit's ``file_paths`` (every file of a Codex patch) are each judged: any for deny, all for allow.
* **WebFetch(domain:host)**: the URL's host is that domain or a subdomain of it.
* **Tool(param:value)**: a scalar input parameter equals ``value`` (``*`` wildcards allowed).
* **Agent / Skill / WebSearch**: a glob on ``subagent_type`` / ``skill`` / ``query``.

Everything is compiled once (``functools.lru_cache``): this runs on every PreToolUse.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import re2

from bus.rules.bashsplit import split_bash
from bus.rules.globs import glob
from bus.rules.limits import PATH_MAX_CHARS, current_limits
from bus.rules.paths import located, path_matches
from bus.rules.shellread import ShellRead, read_shell
from bus.rules.shellrules import shell_matches

EDIT_TOOLS: Final = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
READ_TOOLS: Final = frozenset({"Read", "Grep", "Glob", "LS", "NotebookRead"})
SHELL_TOOLS: Final = frozenset({"Bash", "PowerShell"})
_TOOL_ALIASES: Final = {"Task": "Agent"}
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_*.\-]+")
_PARAM_RULE: Final = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*?)\s*", re.DOTALL)
#: Scalar parameters ``Tool(param:value)`` may name (never a tool's primary content field).
_PARAMS: Final = {
    tool: frozenset(names.split())
    for tool, names in {
        "Bash": "description timeout run_in_background dangerouslyDisableSandbox",
        "PowerShell": "description timeout run_in_background",
        "Agent": "description prompt subagent_type model isolation run_in_background name team_name mode",
        "Read": "offset limit pages",
        "Edit": "old_string new_string replace_all",
        "Write": "content",
        "Grep": "pattern glob output_mode multiline type head_limit",
        "Glob": "pattern",
        "WebFetch": "prompt",
        "WebSearch": "query",
    }.items()
}
_PATH_FIELDS: Final = {"Glob": ("path",), "Grep": ("path",), "LS": ("path",)}
_CONTENT_FIELDS: Final = {"Agent": ("subagent_type",), "Skill": ("skill", "name"), "WebSearch": ("query",)}
RuleKind = Literal["if", "allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """One parsed rule: ``Bash(git push *)`` is ``("Bash", "git push *")``, ``Bash`` is ``("Bash", None)``."""

    tool: str
    content: str | None = None

    def __str__(self) -> str:
        return self.tool if self.content is None else f"{self.tool}({self.content})"


@functools.lru_cache(maxsize=4096)
def parse_rule(text: str) -> PermissionRule:
    """Parse ``Tool`` or ``Tool(specifier)``; :class:`ValueError` says what is wrong with bad syntax."""
    rule = text.strip()
    if not rule:
        raise ValueError("empty permission rule")
    opening = rule.find("(")
    if opening < 0:
        if ")" in rule:
            raise ValueError(f"unbalanced parentheses in permission rule {text!r}")
        tool, content = rule, None
    else:
        if not rule.endswith(")"):
            raise ValueError(f"permission rule {text!r} must end with ')' after its specifier")
        tool, content = rule[:opening].strip(), rule[opening + 1 : -1]
        if not _balanced(content):
            raise ValueError(f"unbalanced parentheses in permission rule {text!r}")
        content = content.strip()
        if not content:
            raise ValueError(f"empty specifier in permission rule {text!r}: write {tool!r} without '()'")
    if not tool:
        raise ValueError(f"permission rule {text!r} has no tool name")
    if not _TOOL_NAME.fullmatch(tool):
        raise ValueError(f"invalid tool name {tool!r} in permission rule {text!r}")
    return PermissionRule(tool, content)


def _balanced(content: str) -> bool:
    """Parentheses balance outside quotes and backslash escapes (all counted if a quote is open)."""
    unescaped = re.sub(r"\\.", "", content, flags=re.DOTALL)
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "", unescaped)
    depth = 0
    for c in unescaped if "'" in unquoted or '"' in unquoted else unquoted:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


def rule_matches(
    rule: PermissionRule,
    tool_name: str,
    tool_input: Mapping[str, Any],
    cwd: str | None = None,
    *,
    fail_open: bool | None = None,
    kind: RuleKind = "if",
    home: str | None = None,
    shell: ShellRead | None = None,
) -> bool:
    """Whether ``rule`` matches a call of ``tool_name`` with ``tool_input`` made in ``cwd``.

    ``kind`` is how the rule is used. ``"if"`` (a handler filter), ``"deny"`` and ``"ask"``
    match when any reading of any subcommand matches; ``"allow"`` only when every reading of
    every subcommand does, and never past a leading assignment of a variable outside a small
    safe set. ``"deny"``/``"ask"`` also read a one-directory pattern such as ``secrets/**`` at
    any depth and let ``Read`` path rules cover Edit and Write. ``fail_open`` is the answer when
    a shell command cannot be judged (unparsable, or a ``$VAR``/``$(...)``/backtick stands where
    the pattern's text could go on: some text that starts with the words before it matches); by
    default ``True``, except ``False`` for ``"allow"``. ``home`` is the agent's home, what ``~``
    stands for (:func:`bus.rules.paths.agent_home`; None when unknown). ``shell`` is the shell
    command already read (:func:`bus.rules.shellread.read_shell`), when the caller has it.
    """
    deny_rule = kind in ("deny", "ask")
    if fail_open is None:
        fail_open = kind != "allow"
    tool = _TOOL_ALIASES.get(tool_name, tool_name)
    rule_tool = _TOOL_ALIASES.get(rule.tool, rule.tool)
    if not _tool_applies(rule_tool, tool, rule.content is not None and deny_rule):
        return False
    content = rule.content
    if content is None:
        return True
    param = _PARAM_RULE.fullmatch(content)
    params = _PARAMS.get(tool, frozenset()) | _PARAMS.get(rule_tool, frozenset())
    if param and (param.group(1) in params or tool.startswith("mcp__")):
        return _param_matches(tool_input.get(param.group(1)), param.group(2))
    if tool in SHELL_TOOLS:
        command = tool_input.get("command")
        if not isinstance(command, str):
            return False
        read = shell if shell is not None else read_shell(command, tool == "PowerShell")
        return shell_matches(content, read, tool == "PowerShell", fail_open, every=kind == "allow")
    limits = current_limits()
    if tool in EDIT_TOOLS or tool in READ_TOOLS:
        paths = call_paths(tool, tool_input, cwd)
        if paths_too_long(paths, cwd):
            return fail_open if paths else False  # cannot be judged
        every = all if kind == "allow" else any
        return bool(paths) and every(path_matches(content, p, cwd, deny_rule, home, kind != "allow") for p in paths)
    if tool == "WebFetch":
        url = tool_input.get("url")
        return fail_open if isinstance(url, str) and limits.string_too_long(url) else _url_matches(content, url)
    for field in _CONTENT_FIELDS.get(tool, ()):
        if isinstance(value := tool_input.get(field), str):
            return fail_open if limits.string_too_long(value) else glob(content).fullmatch(value)
    return False


def call_paths(tool: str, tool_input: Mapping[str, Any], cwd: str | None) -> list[str]:
    """The paths a file tool's call touches (Glob/Grep/LS search the cwd by default)."""
    fields = _PATH_FIELDS.get(tool)
    path = cwd if fields is not None else None
    for field in fields or ("file_path", "notebook_path"):
        if value := tool_input.get(field):
            path = value
            break
    more = tool_input.get("file_paths") if tool in EDIT_TOOLS else None  # every file of a multi-file edit
    if not isinstance(more, list):
        return [path] if isinstance(path, str) else []
    return [p for p in (path, *more) if isinstance(p, str)]


def paths_too_long(paths: list[str], cwd: str | None) -> bool:
    """A path (or the cwd) too long to judge: it meets every deny and ask rule of its tool."""
    limits = current_limits()
    return any(limits.string_too_long(p) or len(p) > PATH_MAX_CHARS for p in paths) or bool(
        cwd and len(cwd) > PATH_MAX_CHARS
    )


class Files:
    """A file tool call's paths as path rules read them, read once a call: its paths at once
    (the verdict cache's key), what the path rules need on the first list that misses."""

    __slots__ = ("_located", "cwd", "home", "paths")

    def __init__(self, paths: list[str], cwd: str, home: str | None) -> None:
        self.paths = paths  # permissions.call_paths
        self.cwd = cwd
        self.home = home
        self._located: tuple[bool, str, tuple[str, ...]] | None = None

    def located(self) -> tuple[bool, str, tuple[str, ...]]:
        """Whether a path (or the cwd) is too long to judge (then it meets every deny and ask rule),
        the cwd normalised, and each path absolute and normalised (:func:`bus.rules.paths.located`)."""
        if self._located is None:
            if paths_too_long(self.paths, self.cwd):
                self._located = True, self.cwd, ()
            else:
                self._located = (False, *located(self.paths, self.cwd, self.home))
        return self._located


def read_files(tool_name: str, tool_input: dict[str, Any], cwd: str, home: str | None) -> Files:
    """The paths of a file tool's call below ``cwd`` (not empty), for its path rules."""
    return Files(call_paths(tool_name, tool_input, cwd), cwd, home)


def path_rule(rule: PermissionRule, tool_name: str, kind: RuleKind) -> bool:
    """Whether :func:`rule_matches` judges ``rule`` on the paths of a ``tool_name`` call."""
    tool = _TOOL_ALIASES.get(tool_name, tool_name)
    rule_tool = _TOOL_ALIASES.get(rule.tool, rule.tool)
    if (tool not in EDIT_TOOLS and tool not in READ_TOOLS) or rule.content is None:
        return False
    if not _tool_applies(rule_tool, tool, kind in ("deny", "ask")):
        return False
    param = _PARAM_RULE.fullmatch(rule.content)
    return not (param and param.group(1) in (_PARAMS.get(tool, frozenset()) | _PARAMS.get(rule_tool, frozenset())))


def rule_param(rule: PermissionRule) -> str | None:
    """The parameter a ``Tool(param:value)`` rule may name (whether it does depends on the tool
    it is matched for): the only input field besides the command or paths a rule reads."""
    param = _PARAM_RULE.fullmatch(rule.content) if rule.content is not None else None
    return param.group(1) if param else None


def rule_applies(rule: PermissionRule, tool_name: str, kind: RuleKind) -> bool:
    """Whether ``rule``'s tool part covers ``tool_name`` (else :func:`rule_matches` is ``False``)."""
    tool = _TOOL_ALIASES.get(tool_name, tool_name)
    rule_tool = _TOOL_ALIASES.get(rule.tool, rule.tool)
    return _tool_applies(rule_tool, tool, rule.content is not None and kind in ("deny", "ask"))


def _tool_applies(rule_tool: str, tool: str, read_covers_edits: bool) -> bool:
    if rule_tool == tool:
        return True
    if rule_tool == "Edit":
        return tool in EDIT_TOOLS
    if rule_tool == "Read":
        return tool in READ_TOOLS or (read_covers_edits and tool in ("Edit", "Write", "MultiEdit"))
    if "*" in rule_tool:
        return glob(rule_tool).fullmatch(tool)
    return rule_tool.startswith("mcp__") and "__" not in rule_tool[5:] and tool.startswith(rule_tool + "__")


def _param_matches(value: object, expected: str) -> bool:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (str, int, float)):
        text = str(value)
    else:
        return False  # omitted, null, or not a scalar
    return glob(expected).fullmatch(text)


# --- WebFetch ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _domain_regex(domain: str) -> Any:
    """``example.com`` and its subdomains; ``*.x`` subdomains only; other ``*`` within a label. On RE2
    (an RE2 pattern): backtracking, ``*a*a*a*b`` took exponential time in the length of the host."""
    domain = domain.strip().lower().rstrip(".")
    prefix = r"(?:[^.]+\.)+" if domain.startswith("*.") else r"(?:[^.]+\.)*"
    labels = domain[2:] if domain.startswith("*.") else domain
    regex = r"(?s).*" if domain == "*" else prefix + "[^.]*".join(re.escape(part) for part in labels.split("*"))
    return re2.compile(regex.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))


def _url_matches(content: str, url: object) -> bool:
    if not isinstance(url, str):
        return False
    if not content.startswith("domain:"):
        return glob(content).fullmatch(url)
    try:
        host = urlsplit(url if "//" in url else "//" + url).hostname
    except ValueError:
        return False
    text = str(host).rstrip(".").encode("utf-8", "surrogatepass")  # RE2 matches bytes; lone surrogates too
    return bool(host) and _domain_regex(content[7:]).fullmatch(text) is not None


__all__ = [
    "EDIT_TOOLS",
    "READ_TOOLS",
    "SHELL_TOOLS",
    "Files",
    "PermissionRule",
    "RuleKind",
    "call_paths",
    "parse_rule",
    "path_rule",
    "paths_too_long",
    "read_files",
    "rule_applies",
    "rule_matches",
    "rule_param",
    "split_bash",
]
