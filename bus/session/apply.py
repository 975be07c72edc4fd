"""The settle script's session operations, in Python: for what runs without Redis.

``hookbus policy test`` (a case's session history), ``hookbus policy replay`` (a recorded
session in order) and the benchmark keep a session's state in this process and change it
exactly as :data:`bus.session.script.APPLY_LUA` does in Redis (the tests compare the two).
"""

from __future__ import annotations

from collections.abc import Sequence

from bus.session.definitions import BUCKETS, FIRST_SEEN_FIELD, VERSION_FIELD
from bus.session.state import SessionState


def apply_ops(state: SessionState, ops: Sequence[str], now_ms: int) -> SessionState:
    """``state`` after ``ops`` (:func:`bus.session.effects.effects`) at ``now_ms``."""
    fields = dict(state.fields)
    for op in ops:
        code, field, *rest = op.split(" ")
        if code == "S":
            fields[field] = str(now_ms)
        elif code == "D":
            fields.pop(field, None)
        elif code == "I":
            fields[field] = str(int(fields.get(field) or 0) + 1)
        elif code == "A":
            fields[field] = str(int(fields.get(field) or 0) + int(rest[0]))
        elif code == "M":
            fields[field] = str(max(int(fields.get(field) or 0), int(rest[0])))
        elif code == "Z":
            fields[field] = "0"
        elif code == "R":
            bucket = now_ms // int(rest[0])
            slot = f"{field}:{bucket % (BUCKETS + 1)}"
            head, _, count = (fields.get(slot) or "").partition(":")
            fields[slot] = f"{bucket}:{int(count) + 1 if head == str(bucket) else 1}"
    if not ops and not fields:
        return state
    fields.setdefault(FIRST_SEEN_FIELD, str(now_ms))
    if ops:
        fields[VERSION_FIELD] = str(int(fields.get(VERSION_FIELD) or 0) + 1)
    return SessionState(fields)


def touched(ops: Sequence[str], now_ms: int) -> set[str]:
    """The fields :func:`apply_ops` may change applying ``ops`` at ``now_ms``."""
    found = {FIRST_SEEN_FIELD, VERSION_FIELD}
    for op in ops:
        code, field, *rest = op.split(" ")
        found.add(f"{field}:{now_ms // int(rest[0]) % (BUCKETS + 1)}" if code == "R" else field)
    return found


__all__ = ["apply_ops", "touched"]
