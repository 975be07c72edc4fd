"""The one exception hierarchy of hookbus.

    HookBusError
    ├── ConfigError            bad settings or CLI arguments
    │   └── PolicyError        a policy file that does not load or validate
    ├── BusUnavailable         Redis cannot be reached (the caller fails open)
    ├── HookError              a handler failed: non-blocking, counted as ``hook_error``
    │   ├── HookTimeout        a handler ran past its timeout
    │   └── OutputSchemaError  a handler's JSON output does not fit the event's schema
    └── RedisServerError       the embedded Redis server would not start

Dependency errors (redis-py, httpx, OSError) are mapped to these at the boundary with
``raise ... from exc`` so callers never catch a library's exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass


class HookBusError(Exception):
    """Base class of every error hookbus raises on purpose."""


class ConfigError(HookBusError):
    """Settings, flags or environment variables that cannot be used."""


@dataclass(frozen=True)
class PolicyProblem:
    """One problem found in a policy file, with where it is."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        loc = f" {self.path}:" if self.path else ""
        return f"{where}:{loc} {self.message}"


class PolicyError(ConfigError):
    """A policy file that does not load or validate; ``problems`` lists every error."""

    def __init__(self, problems: list[PolicyProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class BusUnavailable(HookBusError):
    """Redis cannot be reached or did not answer in time."""


class HookError(HookBusError):
    """A handler failed in a non-blocking way (the action proceeds)."""


class HookTimeout(HookError):
    """A handler ran past its timeout and was cancelled."""


class OutputSchemaError(HookError):
    """A handler's JSON output does not fit the schema of the event it answered."""


class RedisServerError(HookBusError):
    """The embedded Redis server could not be started."""


__all__ = [
    "BusUnavailable",
    "ConfigError",
    "HookBusError",
    "HookError",
    "HookTimeout",
    "OutputSchemaError",
    "PolicyError",
    "PolicyProblem",
    "RedisServerError",
]
