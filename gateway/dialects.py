"""Client dialects: translating other agents' hook formats at the edge.

Only Claude Code's own format is spoken inside hookbus; a dialect maps a client's input
to it on the way in and the decision back to what that client reads on the way out.
"""

from __future__ import annotations

from typing import Any


def from_dialect(dialect: str, hook_input: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
    """Translate ``hook_input`` from ``dialect`` to Claude Code's format (identity for now)."""
    return hook_input, body


def to_dialect(dialect: str, event: str, output: dict[str, Any]) -> dict[str, Any]:
    """Translate a Claude Code output object to what ``dialect``'s clients read."""
    return output


__all__ = ["from_dialect", "to_dialect"]
