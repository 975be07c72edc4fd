"""Codex's shell exit codes for its ``PostToolUse`` hook, read where Codex writes them.

Codex sends a ``PostToolUse`` for a shell command whether it succeeded or not: its input has the
command's output as ``tool_response`` and no exit code, and Codex has no failure event. Codex
writes the exit code in the session's rollout (the hook input's ``transcript_path``, a JSON
Lines file Codex itself keeps) before it runs the hook: the command's ``item_completed`` event,
``{"type":"CommandExecution","id":<the call's id>, ..., "exit_code":N}``. The shim runs where
Codex runs, as its user, so it can read it: :func:`with_exit_code` adds the code to the input as
``hookbus_exit_code``, and the Codex dialect makes a non-zero one a ``PostToolUseFailure``
(what the loop gate counts).

Only the rollout's last MiB is read, with ``O_NOFOLLOW`` and ``O_NONBLOCK`` (a regular file or
nothing). Inside a JSON line a string's quotes are escaped, so the unescaped ``"type":"Command
Execution","id":"..."`` and ``"exit_code":`` that are looked for cannot come from a command's
output. Anything not found, unreadable or unexpected leaves the input as it was (a success, as
without this module): the code can only add a failure Codex reported, never hide one.

Standard library only, and no ``os``: the installed command loads it from the package folder.
"""

TYPE_CHECKING = False
if TYPE_CHECKING or __package__:
    from hookbus.shim_json import json_object
else:  # loaded by shim_start.py from the package folder, without the package
    from shim_json import json_object

#: The field the exit code is added as (the Codex dialect reads it).
EXIT_CODE_FIELD = "hookbus_exit_code"
#: How much of the rollout's end is read.
TAIL_BYTES = 1 << 20
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


def rollout_exit_code(path: str, call: str) -> "int | None":
    """The exit code the rollout at ``path`` gives the command of call ``call``; None if it gives none."""
    tail = _tail(path)
    if tail is None:
        return None
    at = tail.rfind(b'"type":"CommandExecution","id":"' + call.encode() + b'"')
    if at < 0:
        return None
    line_start = tail.rfind(b"\n", 0, at) + 1
    line_end = tail.find(b"\n", at)
    line = tail[line_start : len(tail) if line_end < 0 else line_end]
    if b'"type":"item_completed"' not in line:
        return None
    found = line.find(b'"exit_code":', at - line_start)
    if found < 0:
        return None
    digits = line[found + len(b'"exit_code":') :].lstrip(b" ")
    end = 1 if digits[:1] == b"-" else 0
    while end < len(digits) and digits[end : end + 1].isdigit():
        end += 1
    try:
        return int(digits[:end])
    except ValueError:  # null, or not a number
        return None


def _tail(path: str) -> "bytes | None":
    """The last :data:`TAIL_BYTES` of the regular file at ``path`` (no link followed), or None."""
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
        start = max(0, info.st_size - TAIL_BYTES)
        chunks = []
        left = info.st_size - start
        while left > 0:
            chunk = posix.pread(fd, min(left, 1 << 18), start)
            if not chunk:
                break
            chunks.append(chunk)
            start += len(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        posix.close(fd)


__all__ = ["EXIT_CODE_FIELD", "TAIL_BYTES", "rollout_exit_code", "with_exit_code"]
