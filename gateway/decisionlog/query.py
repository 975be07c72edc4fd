"""The query string of the decision-log readers: the parameters they know, and their record filter.

``tenant``, ``session``, ``event``, ``decision``, ``tool`` and ``agent`` repeat or take commas, and make
one :class:`bus.decisionlog.audit.RecordFilter`, the filter of ``hookbus tail`` and ``hookbus
audit export`` too; a caller's scope is a tenant no filter can leave.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from starlette.datastructures import QueryParams

from bus.decisionlog.audit import RecordFilter
from bus.errors import RequestRejected

#: Each filter parameter and the :class:`RecordFilter` field it fills.
FILTERS: Final = {
    "tenant": "tenants",
    "session": "sessions",
    "event": "events",
    "decision": "decisions",
    "tool": "tools",
    "agent": "agents",
}
_MAX_VALUES, _MAX_CHARS = 64, 256


def check_parameters(query: QueryParams, known: Iterable[str]) -> None:
    """400 for a parameter not in ``known``."""
    names = frozenset(known)
    if unknown := sorted(set(query) - names):
        raise RequestRejected(
            400, "invalid_parameter", f"unknown parameter {unknown[0]!r}; known: {', '.join(sorted(names))}"
        )


def query_filter(query: QueryParams, scope: str | None, names: Collection[str] = tuple(FILTERS)) -> RecordFilter:
    """The filter of the parameters ``names`` (of :data:`FILTERS`); 400 for too many or too long
    values, 403 for a tenant outside ``scope``."""
    passes = RecordFilter.of(scope, **{FILTERS[name]: query.getlist(name) for name in names})
    for name in names:
        found: frozenset[str] = getattr(passes, FILTERS[name])
        if len(found) > _MAX_VALUES or any(len(v) > _MAX_CHARS for v in found):
            raise RequestRejected(
                400, "invalid_filter", f"'{name}': at most {_MAX_VALUES} values of at most {_MAX_CHARS} characters"
            )
        if name == "tenant" and scope is not None and found - {scope}:
            other = sorted(found - {scope})[0]
            raise RequestRejected(403, "forbidden", f"this token reads tenant {scope!r} only, not {other!r}")
    return passes


__all__ = ["FILTERS", "check_parameters", "query_filter"]
