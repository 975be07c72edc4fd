"""Session state of a policy test, in this process: what the engine keeps in Redis, held in a dict.

The engine keeps two kinds of per-session state in Redis: ``once`` markers (a handler that
already ran in this session) and the Stop guard's count of consecutive blocks. A policy test
runs with no Redis at all, so :class:`SessionState` answers the few commands the engine sends
for them (``SET`` with ``NX``, ``DELETE``, and a pipeline of ``INCR`` and ``EXPIRE``), and a case
can seed it: a Stop already blocked seven times, a ``once`` handler that already fired.
Expiry is not kept: a case lasts milliseconds, far less than any of the engine's TTLs.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any


class SessionState:
    """The subset of ``redis.asyncio.Redis`` the engine uses for ``once`` and the Stop guard."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    async def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    async def set(self, key: str, value: bytes | str | int, *, nx: bool = False, ex: int | None = None) -> bool:
        """``SET key value [NX] [EX s]``: False when ``nx`` and the key exists."""
        if nx and key in self.values:
            return False
        self.values[key] = value if isinstance(value, bytes) else str(value).encode()
        return True

    async def delete(self, *keys: str) -> int:
        return sum(self.values.pop(key, None) is not None for key in keys)

    async def incr(self, key: str) -> int:
        count = int(self.values.get(key, b"0")) + 1
        self.values[key] = str(count).encode()
        return count

    def pipeline(self, transaction: bool = True) -> Pipeline:
        return Pipeline(self)


class Pipeline:
    """Queued ``INCR`` and ``EXPIRE`` commands, run in order by :meth:`execute`."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.queued: list[tuple[str, str]] = []

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.queued.clear()

    def incr(self, key: str) -> Pipeline:
        self.queued.append(("incr", key))
        return self

    def expire(self, key: str, seconds: int) -> Pipeline:
        self.queued.append(("expire", key))
        return self

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        results: list[Any] = []
        for command, key in self.queued:
            if command == "incr":
                results.append(await self.state.incr(key))
            else:
                results.append(key in self.state.values)
        self.queued.clear()
        return results


__all__ = ["Pipeline", "SessionState"]
