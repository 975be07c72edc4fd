"""One decision at a time per session: an event of a session with state waits its turn.

An event whose policy keeps session state takes its session's turn before it reads the
dispatcher's copy of the state, and holds it until its settle is answered (the entry ends:
written, refused by Redis or failed), so that the next event of the session is decided on the
state that settle wrote. Without turns, every event in flight at once is decided on the same
state and all but one are refused by the settle's version check and decided again, and so on: a
session with many calls in flight could use up its attempts. With them, a settle is refused only
when some other writer moved the session on (another dispatcher, an event answered fail-open),
and each refusal means that writer made progress.

Turns are a matter of speed, not of safety: the version check at the settle is what keeps a
decision on an old state from landing. So an event waits for its turn only for so long
(:func:`turn_wait_s`), then is decided without it: an event that never ends its turn (a settle
that cannot be written) costs the session's next events some waiting, never a decision.

Waiting events keep their dispatch slot: a session flooding one dispatcher holds slots and so
slows the others behind it, within its tenant's share of the slots (:mod:`workers.dispatcher.slots`);
the gateway's per-session rate limit is what stops such a flood.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Final

from bus.stream.protocol import Request

#: An entry: its stream and id.
Entry = tuple[str, bytes]

#: What a blocking event keeps of its deadline to be decided and settled once it stops waiting.
DECIDE_S: Final = 0.25
#: The longest a non-blocking event waits for its turn (no deadline of its own).
WAIT_S: Final = 10.0


def turn_wait_s(request: Request) -> float:
    """How long ``request`` waits for its session's turn before it is decided without it."""
    return max(0.0, request.remaining_s() - DECIDE_S) if request.blocking else WAIT_S


class SessionTurns:
    """Whose turn it is to decide an event of each session, and who waits for it, in order."""

    def __init__(self) -> None:
        #: A session's waiters, in order; a session is here while one of its events holds the turn
        #: (None: no event waits, the usual case, with no queue made for it).
        self._waiting: dict[str, collections.deque[tuple[asyncio.Future[None], Entry]] | None] = {}
        #: The session whose turn each entry holds.
        self._holding: dict[Entry, str] = {}

    def __len__(self) -> int:
        """How many sessions have an event between its decision and its settle."""
        return len(self._waiting)

    def holds(self, entry: Entry) -> bool:
        return entry in self._holding

    def hold(self, key: str, entry: Entry) -> bool:
        """Hold the turn of the session at ``key`` for ``entry`` if no other event holds it (the
        usual case, with no wait: :meth:`take` waits for it otherwise)."""
        if key in self._waiting:
            return False
        self._waiting[key] = None
        self._holding[entry] = key
        return True

    async def take(self, key: str, entry: Entry, timeout_s: float | None = None) -> bool:
        """Wait until no other event of the session at ``key`` holds its turn, then hold it for
        ``entry`` until :meth:`release`. False when ``timeout_s`` (None: no limit) passed first (not held)."""
        if self.hold(key, entry):
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._waiting[key]
        if waiting is None:
            waiting = self._waiting[key] = collections.deque()
        waiting.append((waiter, entry))
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except TimeoutError:
            # Handed the turn as the timer fired: it is held all the same (released when the entry ends).
            return self.holds(entry)
        except asyncio.CancelledError:
            self.release(entry)  # handed the turn as it was cancelled: pass it on
            raise
        return True

    def release(self, entry: Entry) -> None:
        """``entry`` ended: hand its session's turn to the next event waiting (none: it is free)."""
        key = self._holding.pop(entry, None)
        if key is None:
            return
        waiting = self._waiting[key]
        while waiting:  # None: nobody waits
            waiter, following = waiting.popleft()
            if not waiter.done():  # not given up
                self._holding[following] = key
                waiter.set_result(None)
                return
        del self._waiting[key]


__all__ = ["DECIDE_S", "WAIT_S", "Entry", "SessionTurns", "turn_wait_s"]
