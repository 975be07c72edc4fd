"""The one exception hierarchy of hookbus.

    HookBusError
    ├── ConfigError              bad settings or CLI arguments
    │   ├── PolicyError          a policy file that does not load or validate
    │   ├── PluginError          a plugin module that cannot be loaded
    │   └── TimeError            a time that cannot be read (--since, ?until=)
    ├── BusUnavailable           Redis cannot be reached (the caller fails open)
    ├── RedisCommandError        Redis refused a command (NOGROUP, WRONGTYPE, NOSCRIPT...)
    ├── RequestRejected          the gateway refuses a request (4xx with a JSON body)
    ├── ProtocolError            a stream entry or reply hookbus did not write
    ├── PolicyRejected           a pushed policy version a node refuses to activate (signing)
    ├── HookError                a handler failed: non-blocking, counted as ``hook_error``
    │   ├── HookTimeout          a handler ran past its timeout
    │   │   ├── OutboundTimeout  an outbound request past its deadline (workers.outbound)
    │   │   └── LlmTimeout       an LLM call past its timeout (also an LlmError)
    │   ├── OutputSchemaError    a handler's JSON output does not fit the event's schema
    │   ├── PluginCallbackError  a plugin callback raised (bus.hooks.plugins)
    │   ├── ToolError            an agent hook's tool call failed (workers.handlers.agent)
    │   ├── OutboundError        an outbound request failed (workers.outbound)
    │   │                        and, from the SSRF guard (bus.runtime.ssrf):
    │   ├── SSRFBlocked          a blocked address or scheme
    │   ├── ResolveError         a host name that does not resolve
    │   ├── ResponseTooLarge     a response past maxResponseBytes
    │   ├── LlmError             an LLM call failed (prompt and agent hooks)
    │   └── SigningError         an http hook delivery that cannot be signed
    ├── RedisServerError         the embedded Redis server would not start
    └── ArchiveError             the audit archive: a file cut short or corrupt, a refused query

Every class hookbus raises on purpose is here. Exceptions that only carry control inside
one module (a parse that gives up, a scan past its budget) stay private to it.

Dependency errors (redis-py, httpx, OSError) are mapped to these at the boundary with
``raise ... from exc`` so callers never catch a library's exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class HookBusError(Exception):
    """Base class of every error hookbus raises on purpose."""


class ConfigError(HookBusError):
    """Settings, flags or environment variables that cannot be used."""


class TimeError(ConfigError):
    """A time that cannot be read (``--since``, ``?until=``)."""


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


class PluginError(ConfigError):
    """A plugin module that cannot be imported or registered."""


class BusUnavailable(HookBusError):
    """Redis cannot be reached or did not answer in time."""


class RedisCommandError(HookBusError):
    """Redis refused a command for a reason that is no outage (``code``: ``NOGROUP``,
    ``BUSYGROUP``, ``WRONGTYPE``, ``NOSCRIPT``, ``WATCH`` for a failed optimistic lock...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RequestRejected(HookBusError):
    """A request the gateway refuses: a 4xx status, an error code and a JSON body."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.headers = status, code, detail, headers or {}


class HookError(HookBusError):
    """A handler failed in a non-blocking way (the action proceeds)."""


class HookTimeout(HookError):
    """A handler ran past its timeout and was cancelled."""


class OutboundTimeout(HookTimeout):
    """An outbound request that did not finish before its deadline."""


class OutputSchemaError(HookError):
    """A handler's JSON output does not fit the schema of the event it answered."""


class PluginCallbackError(HookError):
    """A plugin callback raised; ``callback`` is it, the original exception is the cause."""

    def __init__(self, name: str, callback: Any, exc: BaseException) -> None:
        super().__init__(f"{name}: {type(exc).__name__}: {exc}")
        self.callback = callback


class ToolError(HookError):
    """A tool call that cannot be answered; its message goes back to the model."""


class OutboundError(HookError):
    """An outbound request that failed: bad URL, connection refused, TLS or protocol error."""


class SSRFBlocked(HookError):
    """An outbound request refused by the SSRF guard (blocked address or scheme)."""


class ResolveError(HookError):
    """A host name that does not resolve to any address."""


class ResponseTooLarge(HookError):
    """A response body longer than the policy's ``maxResponseBytes``."""


class LlmError(HookError):
    """An LLM call failed (configuration, transport, status or reply shape); non-blocking."""


class LlmTimeout(LlmError, HookTimeout):
    """An LLM call ran past its timeout."""


class SigningError(HookError):
    """A delivery that cannot be signed: the secret's variable is unset or does not hold a secret."""


class ProtocolError(HookBusError):
    """A stream entry or reply that hookbus did not write (or a newer, incompatible one)."""


#: Why a node refused to activate a pushed policy version (the ``reason`` of ``hookbus_policy_rejected_total``).
POLICY_REJECTED_REASONS = ("unsigned", "untrusted_key", "bad_signature", "wrong_scope", "outside_key_scope")


class PolicyRejected(HookBusError):
    """A pushed policy version a node refuses to activate; ``reason`` is one of :data:`POLICY_REJECTED_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in POLICY_REJECTED_REASONS
        super().__init__(detail)
        self.reason = reason


class RedisServerError(HookBusError):
    """The embedded Redis server could not be started."""


class ArchiveError(HookBusError):
    """The audit archive cannot be written or read: a file cut short or corrupt, a refused query."""


__all__ = [
    "POLICY_REJECTED_REASONS",
    "ArchiveError",
    "BusUnavailable",
    "ConfigError",
    "HookBusError",
    "HookError",
    "HookTimeout",
    "LlmError",
    "LlmTimeout",
    "OutboundError",
    "OutboundTimeout",
    "OutputSchemaError",
    "PluginCallbackError",
    "PluginError",
    "PolicyError",
    "PolicyProblem",
    "PolicyRejected",
    "ProtocolError",
    "RedisCommandError",
    "RedisServerError",
    "RequestRejected",
    "ResolveError",
    "ResponseTooLarge",
    "SSRFBlocked",
    "SigningError",
    "TimeError",
    "ToolError",
]
