"""Codex's shell exit codes for its ``PostToolUse`` hook, read where Codex writes them.

Codex sends a ``PostToolUse`` for a shell command whether it succeeded or not: its input has the
command's output as ``tool_response`` and no exit code, and Codex has no failure event. Codex
writes the exit code in the session's rollout (the hook input's ``transcript_path``, a JSON
Lines file Codex itself keeps) before it runs the hook: the command's ``item_completed`` event,
``{"type":"CommandExecution","id":<the call's id>, ..., "exit_code":N}``, the code after the
command's whole output. The shim runs where Codex runs, as its user, so it can read it:
:func:`with_exit_code` adds the code to the input as ``hookbus_exit_code``, and the Codex dialect
makes a non-zero one a ``PostToolUseFailure`` (what the loop gate counts).

The rollout is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK`` (a regular file or nothing) and
searched from its end backwards, :data:`CHUNK_BYTES` a read, for the call's line: usually the
last one, which the first read finds. A command with a large output makes a long line, and later
lines may follow it, so the search goes on, but no further than :data:`SCAN_BYTES` from the end,
and the line must lie wholly within them. A call with no such line (another tool's
``PostToolUse``) costs a search of the rollout up to that bound, about 2 ms per 10 MiB read: 64 MiB
keeps that near 20 ms and still gives the code of a command with tens of MiB of output. Memory
stays one chunk: the line's start, its ``"exit_code":`` and its end are found by their offsets,
not by holding the line.

Inside a JSON line a string's quotes are escaped, so the unescaped ``"type":"CommandExecution",
"id":"..."``, ``"type":"item_completed"`` and ``"exit_code":`` that are looked for cannot come
from a command's output. Anything not found, unreadable or unexpected leaves the input as it was
(a success, as without this module): the code can only add a failure Codex reported, never hide
one.

Standard library only, and no ``os``: the installed command loads it from the package folder.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
if TYPE_CHECKING or __package__:
    from hookbus.shim_json import json_object
else:  # loaded by shim_start.py from the package folder, without the package
    from shim_json import json_object

#: The field the exit code is added as (the Codex dialect reads it).
EXIT_CODE_FIELD = "hookbus_exit_code"
#: How far from the rollout's end its call's line is looked for (the line wholly within it).
SCAN_BYTES = 64 << 20
#: How much of the rollout one read takes (the memory the search holds).
CHUNK_BYTES = 64 << 10
_COMPLETED = b'"type":"item_completed"'
_EXIT_CODE = b'"exit_code":'
#: The tools whose calls Codex runs as commands, with an exit code in the rollout (the Codex
#: dialect's shell tools and ``write_stdin``): the rollout is searched for these alone, so that a
#: patch or an MCP call does not pay for a search that cannot find a line.
COMMAND_TOOLS = frozenset(
    {"Bash", "shell", "exec_command", "local_shell", "shell_command", "unified_exec", "write_stdin"}
)
_REGULAR, _FILE_TYPE = 0o100000, 0o170000
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")


def with_exit_code(body: bytes) -> bytes:
    """``body`` with ``"hookbus_exit_code": N`` added when it is a Codex ``PostToolUse`` whose call's
    exit code the session's rollout holds; else ``body`` as it is."""
    if b'"PostToolUse"' not in body:
        return body
    hook_input = json_object(body)
    if hook_input is None or hook_input.get("hook_event_name") != "PostToolUse" or EXIT_CODE_FIELD in hook_input:
        return body
    if hook_input.get("tool_name") not in COMMAND_TOOLS:
        return body
    path, call = hook_input.get("transcript_path"), hook_input.get("tool_use_id")
    if not (isinstance(path, str) and path.startswith("/") and isinstance(call, str) and call):
        return body
    if not set(call) <= _ID_CHARS:
        return body
    code = rollout_exit_code(path, call)
    if code is None:
        return body
    start = body.index(b"{")  # an object with keys: its first byte past the whitespace
    return b'%s{"%s":%d,%s' % (body[:start], EXIT_CODE_FIELD.encode(), code, body[start + 1 :])


def rollout_exit_code(path: str, call: str, *, chunk_bytes: int = CHUNK_BYTES) -> "int | None":
    """The exit code the rollout at ``path`` gives the command of call ``call``; None if it gives none.

    ``chunk_bytes`` is how much one read takes (:data:`CHUNK_BYTES`)."""
    try:
        import posix

        flags = posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC
        fd = posix.open(path, flags)
    except (ImportError, OSError, ValueError):
        return None
    try:
        info = posix.fstat(fd)
        if info.st_mode & _FILE_TYPE != _REGULAR:
            return None
        return _exit_code(_Rollout(posix.pread, fd, info.st_size, chunk_bytes), call)
    except (OSError, ValueError):
        return None
    finally:
        posix.close(fd)


def _exit_code(rollout: "_Rollout", call: str) -> "int | None":
    """The exit code on the last ``item_completed`` line of ``call``'s command in ``rollout``, the
    line wholly within its last :data:`SCAN_BYTES`."""
    needle = b'"type":"CommandExecution","id":"' + call.encode() + b'"'
    floor = max(0, rollout.size - SCAN_BYTES)
    end = rollout.size
    while True:
        at = rollout.rfind(needle, floor, end)
        if at < 0:
            return None
        newline = rollout.rfind(b"\n", max(0, floor - 1), at)
        if newline < 0 < floor:  # the line starts before the scanned bytes
            return None
        line_start = newline + 1
        if rollout.rfind(_COMPLETED, line_start, at) >= 0:  # the event's type, before its item
            break
        end = line_start  # another event of the call's item: its completion is earlier
    after = at + len(needle)
    line_end = rollout.find(b"\n", after, rollout.size)
    found = rollout.find(_EXIT_CODE, after, rollout.size if line_end < 0 else line_end)
    if found < 0:
        return None
    value = rollout.read(found + len(_EXIT_CODE), min(rollout.size, found + len(_EXIT_CODE) + 32))
    digits = value.lstrip(b" ")
    length = 1 if digits[:1] == b"-" else 0
    while length < len(digits) and digits[length : length + 1].isdigit():
        length += 1
    if length == len(digits) and len(value) == 32:  # no end to the number in sight
        return None
    try:
        return int(digits[:length])
    except ValueError:  # null, or not a number
        return None


class _Rollout:
    """The first ``size`` bytes of an open file, searched a chunk at a time."""

    def __init__(self, pread: "Callable[[int, int, int], bytes]", fd: int, size: int, chunk_bytes: int) -> None:
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be positive")
        self.pread, self.fd, self.size, self.chunk_bytes = pread, fd, size, chunk_bytes

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; OSError if the file no longer has them."""
        data = self.pread(self.fd, end - start, start)
        if len(data) != end - start:
            raise OSError("the rollout shrank while it was read")
        return data

    def rfind(self, sub: bytes, start: int, end: int) -> int:
        """The offset of the last ``sub`` wholly within ``[start, end)``, or -1."""
        before = end - len(sub) + 1  # a match starting before this ends by ``end``
        while before > start:
            at = max(start, before - self.chunk_bytes)
            found = self.read(at, before + len(sub) - 1).rfind(sub)
            if found >= 0:
                return at + found
            before = at
        return -1

    def find(self, sub: bytes, start: int, end: int) -> int:
        """The offset of the first ``sub`` wholly within ``[start, end)``, or -1."""
        last = end - len(sub) + 1  # a match starting before this ends by ``end``
        while start < last:
            stop = min(last, start + self.chunk_bytes)
            found = self.read(start, stop + len(sub) - 1).find(sub)
            if found >= 0:
                return start + found
            start = stop
        return -1


__all__ = ["CHUNK_BYTES", "COMMAND_TOOLS", "EXIT_CODE_FIELD", "SCAN_BYTES", "rollout_exit_code", "with_exit_code"]
