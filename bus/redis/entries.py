"""Stream entry ids (``<ms>-<seq>``): read, ordered and checked the one way every reader does.

Redis writes ``<ms>-<seq>``: the millisecond it added the entry and a sequence number within
it, each at most 20 digits (64 bits). Readers order entries by ``(ms, seq)``, take time
windows from the millisecond, and refuse a resume point that is no entry id.
"""

from __future__ import annotations

import re
from typing import Final

#: An entry id as Redis writes it (for ``fullmatch``).
ENTRY_ID: Final = re.compile(r"\d{1,20}-\d{1,20}")


def entry_order(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry id as a sortable ``(ms, seq)`` (``"1700000000000-3"`` -> ``(1700000000000, 3)``)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def entry_ms(entry_id: bytes | str) -> int:
    """The millisecond part of a stream entry id."""
    return entry_order(entry_id)[0]


#: The largest part of an entry id (each of ``ms`` and ``seq`` is 64 bits).
MAX_PART: Final = 2**64 - 1


def is_entry_id(text: str) -> bool:
    """Whether ``text`` is an entry id as Redis writes it (each part at most :data:`MAX_PART`)."""
    return ENTRY_ID.fullmatch(text) is not None and max(entry_order(text)) <= MAX_PART


__all__ = ["ENTRY_ID", "MAX_PART", "entry_ms", "entry_order", "is_entry_id"]
