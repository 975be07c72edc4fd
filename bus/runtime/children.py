"""Child processes that do not outlive their parent (Linux ``PR_SET_PDEATHSIG``).

Used as ``preexec_fn``: between fork and exec the child only makes one foreign call, to a
``prctl`` resolved in the parent beforehand. Elsewhere than Linux these do nothing.
"""

from __future__ import annotations

import ctypes
import signal
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved once in the parent: between fork and exec the child only makes the one call.
_PRCTL = _load_prctl()


def die_with_parent() -> None:
    """``preexec_fn`` for children: get SIGTERM when the parent dies (Linux only)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def kill_with_parent() -> None:
    """``preexec_fn`` for hook processes: SIGKILL when the dispatcher dies (Linux only)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


__all__ = ["die_with_parent", "kill_with_parent"]
