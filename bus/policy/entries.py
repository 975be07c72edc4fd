"""One handler of a policy as the policy holds it: where it came from and its stable id."""

from __future__ import annotations

from dataclasses import dataclass

from bus.policy.schema import Handler


@dataclass(frozen=True)
class HandlerEntry:
    """One handler of the policy, where it came from, and its stable id."""

    event: str
    group_index: int
    handler_index: int
    matcher: str | None
    handler: Handler
    handler_id: str  # sha256 of (event, matcher, canonical handler JSON): equal handlers share it
    source: str

    def __hash__(self) -> int:
        return hash((self.handler_id, self.source, self.group_index, self.handler_index))


__all__ = ["HandlerEntry"]
