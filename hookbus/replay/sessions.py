"""Session states during a policy replay: kept in this process, changed as the settle script would.

A replay reads the decision log in order, so each session's events come in the order they
were settled; the candidate decides each on the session's state so far and the state then
changes as the settle script would change it (:func:`bus.session.apply.apply_ops`), at the
recorded time. At most :data:`MAX_SESSIONS` sessions are kept (the least recently seen go
first, and a session seen again starts over: counted in :attr:`SessionStates.forgotten`).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Final

from bus.session.apply import apply_ops
from bus.session.state import SessionState

#: Sessions whose state a replay keeps at once.
MAX_SESSIONS: Final = 100_000


class SessionStates:
    """Each replayed session's state, by tenant and session id."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self.forgotten = 0
        self._states: collections.OrderedDict[tuple[str, str], SessionState] = collections.OrderedDict()

    def get(self, key: tuple[str, str]) -> SessionState:
        found = self._states.get(key)
        if found is None:
            return SessionState()
        self._states.move_to_end(key)
        return found

    def settled(self, key: tuple[str, str], ops: Sequence[str], at_ms: int) -> None:
        """The session's state after an event's ``ops`` at ``at_ms``."""
        self._states[key] = apply_ops(self.get(key), ops, at_ms)
        self._states.move_to_end(key)
        while len(self._states) > self.max_sessions:
            self._states.popitem(last=False)
            self.forgotten += 1


__all__ = ["MAX_SESSIONS", "SessionStates"]
