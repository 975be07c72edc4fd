"""The settle script's session operations, in Python: for what runs without Redis.

``hookbus policy test`` (a case's session history), ``hookbus policy replay`` (a recorded
session in order) and the benchmark keep a session's state in this process and change it
exactly as :data:`bus.session.script.APPLY_LUA` does in Redis (the tests compare the two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bus.session.definitions import BUCKETS, FIRST_SEEN_FIELD, VERSION_FIELD
from bus.session.state import SessionState


def changes(fields: Mapping[str, str], ops: Sequence[str], now_ms: int) -> dict[str, str | None]:
    """The fields ``ops`` (:func:`bus.session.effects.effects`) write at ``now_ms`` on ``fields``,
    and what they write (None: the field is deleted); not the version and first-seen time."""
    changed: dict[str, str | None] = {}
    for op in ops:
        code, _, rest = op.partition(" ")
        if code == "I":  # the most common: every PreToolUse counts its call
            value = changed[rest] if rest in changed else fields.get(rest)
            changed[rest] = str(int(value or 0) + 1)
        elif code == "S":
            changed[rest] = str(now_ms)
        elif code == "D":
            changed[rest] = None
        elif code == "Z":
            changed[rest] = "0"
        else:
            field, _, arg = rest.partition(" ")
            if code == "R":
                bucket = now_ms // int(arg)
                slot = f"{field}:{bucket % (BUCKETS + 1)}"
                head, _, count = ((changed[slot] if slot in changed else fields.get(slot)) or "").partition(":")
                changed[slot] = f"{bucket}:{int(count) + 1 if head == str(bucket) else 1}"
                continue
            value = changed[field] if field in changed else fields.get(field)
            if code == "A":
                changed[field] = str(int(value or 0) + int(arg))
            elif code == "M":
                changed[field] = str(max(int(value or 0), int(arg)))
    return changed


def written_at(fields: Mapping[str, str], ops: Sequence[str], now_ms: int) -> dict[str, str | None]:
    """What :func:`apply_ops` writes on ``fields`` (None: the field is deleted): what ``ops``
    change, the session's first-seen time when it has none, the version one more when ``ops`` is not empty."""
    if not ops and not fields:
        return {}
    written = changes(fields, ops, now_ms)
    if FIRST_SEEN_FIELD not in fields:
        written.setdefault(FIRST_SEEN_FIELD, str(now_ms))
    if ops:
        written[VERSION_FIELD] = str(int(fields.get(VERSION_FIELD) or 0) + 1)
    return written


def apply_ops(state: SessionState, ops: Sequence[str], now_ms: int) -> SessionState:
    """``state`` after ``ops`` (:func:`bus.session.effects.effects`) at ``now_ms``, a copy."""
    if not ops and not state.fields:
        return state
    fields = dict(state.fields)
    for field, value in written_at(state.fields, ops, now_ms).items():
        if value is None:
            fields.pop(field, None)
        else:
            fields[field] = value
    return SessionState(fields)


def laid_over(state: SessionState, ops: Sequence[str], now_ms: int) -> dict[str, str] | None:
    """What :func:`applied` lays over ``state``'s fields; None when it is ``state`` itself (no
    operations on an empty state)."""
    fields = state.fields
    if not ops and not fields:
        return None
    written = written_at(fields, ops, now_ms)
    if None in written.values():  # a fact cleared
        return {field: "" if value is None else value for field, value in written.items()}
    return written  # type: ignore[return-value]  # no None: checked above


def applied(state: SessionState, ops: Sequence[str], now_ms: int) -> SessionState:
    """``state`` after ``ops`` as :func:`apply_ops` makes it, for reading only: what ``ops`` change
    laid over its fields (a deleted field reads as empty text, as
    :class:`bus.session.state.SessionView` reads a missing one), and it follows ``state``
    (:meth:`bus.session.state.SessionState.following`)."""
    over = laid_over(state, ops, now_ms)
    if over is None:
        return state
    return SessionState({**state.fields, **over}).following(state, over)  # a copy: read at C speed, unlike a ChainMap


def same_at(state: SessionState, ops: Sequence[str], at_ms: int, now_ms: int) -> bool:
    """Whether :func:`applied` at ``at_ms`` makes the very fields :func:`apply_ops` makes at
    ``now_ms``: no fact set at another time, none cleared (``applied`` keeps it as empty text),
    the windows' buckets the same, the session's first-seen time already set."""
    if FIRST_SEEN_FIELD not in state.fields and at_ms != now_ms:
        return False
    for op in ops:
        code, _, rest = op.partition(" ")
        if code == "D" or (code == "S" and at_ms != now_ms):
            return False
        if code == "R" and at_ms != now_ms:
            width = int(rest.rpartition(" ")[2])
            if at_ms // width != now_ms // width:
                return False
    return True


def changed_by(prior: SessionState, state: SessionState, ops: Sequence[str]) -> set[str] | None:
    """The fields that differ between ``prior`` and ``state`` when the settle script made ``state``
    of ``prior`` applying ``ops`` alone (its version one more, its first-seen time the same: no
    other event's operations between, no new start); None when that cannot be told."""
    fields, before = state.fields, prior.fields
    if not ops or state.version != prior.version + 1 or fields.get(FIRST_SEEN_FIELD) != before.get(FIRST_SEEN_FIELD):
        return None
    found = {FIRST_SEEN_FIELD, VERSION_FIELD}
    for op in ops:
        code, field, *_ = op.split(" ")
        if code == "R":  # the bucket of the script's clock
            slots = (f"{field}:{slot}" for slot in range(BUCKETS + 1))
            found.update(slot for slot in slots if fields.get(slot) != before.get(slot))
        else:
            found.add(field)
    return found


__all__ = ["applied", "apply_ops", "changed_by", "changes", "laid_over", "same_at", "written_at"]
