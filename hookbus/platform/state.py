"""One platform per state folder: the lock and the state file of ``hookbus up``.

``<state>/hookbus.lock`` is held with ``flock`` by the running ``hookbus up`` for its whole
life. The kernel drops the lock when the process ends, however it ends (Ctrl-C, SIGKILL, a
crash), so a dead run never leaves a stale lock behind and no pid has to be trusted.
``<state>/hookbus.json`` next to it says what runs: the supervisor's pid, the gateway's
address, every role with its pid and restarts, Redis and the policy revision. It is only
believed while the lock is held. ``hookbus status`` and ``hookbus stop`` read both.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

LOCK_NAME = "hookbus.lock"
STATE_NAME = "hookbus.json"
#: Set in the environment of the roles ``hookbus up`` starts (its pid): they leave start-up
#: warnings to it.
SUPERVISOR_ENV = "HOOKBUS_SUPERVISOR_PID"
#: A role of ``hookbus up`` that exits with this code (sysexits' EX_CONFIG) stops the platform:
#: its configuration is wrong, and a restart would fail the same way.
EXIT_CONFIG = 78


class FolderLock:
    """An exclusive ``flock`` on one file, held until :meth:`release` or until the process ends.

    The descriptor may be handed to a child process (``pass_fds``): the lock then lasts as
    long as either of them has it open.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.fd: int | None = None

    def acquire(self, wait_s: float = 0.2) -> bool:
        """Take the lock; False when another process holds it for longer than ``wait_s``."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # `hookbus status` probes the lock for a moment: only a lasting holder counts.
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.01)
            else:
                self.fd = fd
                return True

    def release(self) -> None:
        """Close the descriptor; the lock goes once no child holds a copy of it either."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)  # never LOCK_UN: that would also unlock a child's inherited copy


def is_held(path: str | Path) -> bool:
    """Whether some process holds the lock on ``path`` right now."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically (readers never see half a file); mode 0600."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def running(state_dir: str | Path) -> dict[str, Any] | None:
    """What ``hookbus up`` runs from ``state_dir`` (its state file), or None when nothing runs.

    A platform that holds the lock but has not written its state yet is reported as
    ``{"status": "starting"}``.
    """
    state = Path(state_dir)
    if not is_held(state / LOCK_NAME):
        return None
    return read_json(state / STATE_NAME) or {"status": "starting"}


def describe_holder(state_dir: str | Path) -> str:
    """``pid 123, port 8787`` for the platform running from ``state_dir`` (for messages)."""
    state = running(state_dir) or {}
    parts = [f"pid {state['pid']}" if "pid" in state else "pid unknown, still starting"]
    if "port" in state:
        parts.append(f"port {state['port']}")
    return ", ".join(parts)


def remove_state(state_dir: str | Path) -> None:
    with contextlib.suppress(OSError):
        (Path(state_dir) / STATE_NAME).unlink()


__all__ = [
    "EXIT_CONFIG",
    "LOCK_NAME",
    "STATE_NAME",
    "SUPERVISOR_ENV",
    "FolderLock",
    "describe_holder",
    "is_held",
    "read_json",
    "remove_state",
    "running",
    "write_json",
]
