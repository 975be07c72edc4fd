"""How much of an agent's input hookbus reads to judge it (``hookbus.limits``), and what is past it.

Fail-open on a missed deadline is the design, so an input that makes the decision slow would
buy an allow. Every stage that reads agent-controlled text is linear in its size; these limits
bound the size:

* ``commandBytes`` (default 64 KiB): a ``Bash``/``PowerShell`` command longer than this is not
  split. It *cannot be judged*: it matches the policy's deny and ask rules for its tool and
  never an allow rule, and the rule's reason says so. A shorter command that the splitter
  cannot read within its time budget is judged the same way.
* ``subcommands`` (default 1024): a command of more simple commands than this (the parts
  between ``;``, ``&&``, ``|`` ..., and those inside substitutions) cannot be judged either:
  every rule and ``if`` reads each of them, so the count bounds the work a command costs.
* ``nestingDepth`` (default 64): a hook input nested deeper cannot be judged: the gateway denies
  it (``400 too_deep`` for an event it does not wait on); the decision log, dead letters and
  every reader handle at least this.
* ``stringBytes`` (default 16 KiB): a file path, URL or other string a rule or a matcher reads
  (not a command, not a file's contents) longer than this cannot be judged either.
* ``unreadableCode`` (default ``"read"``): interpreter code in a command that builds code at
  run time (``python -c "exec(...)"``, :mod:`bus.rules.codereadings`) is judged on what can be
  read of it; ``"unjudged"``: such a command cannot be judged.

:func:`depth_over` measures nesting without recursion and stops at the limit.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

#: The deepest ``nestingDepth`` a policy may set: every later ``orjson.dumps`` handles far more (254).
MAX_NESTING_DEPTH: Final = 200
#: Commands up to this many characters are split on the event loop (a few milliseconds at most);
#: longer ones in a worker thread, within :data:`SPLIT_BUDGET_S`.
INLINE_SPLIT_CHARS: Final = 2048
#: The most one command's splitting may take before it counts as "cannot be judged".
SPLIT_BUDGET_S: Final = 0.5
#: The most ``subcommands`` a policy may set: matching stays within a few milliseconds per event.
MAX_SUBCOMMANDS: Final = 4096
#: No file path is longer on Linux (PATH_MAX): a longer one cannot be judged whatever ``stringBytes`` says.
PATH_MAX_CHARS: Final = 4096


class Limits(BaseModel):
    """``hookbus.limits``: how much of a hook input is read to judge it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    command_bytes: Annotated[int, Field(ge=256)] = Field(default=64 * 1024, alias="commandBytes")
    subcommands: Annotated[int, Field(ge=16, le=MAX_SUBCOMMANDS)] = 1024
    nesting_depth: Annotated[int, Field(ge=8, le=MAX_NESTING_DEPTH)] = Field(default=64, alias="nestingDepth")
    string_bytes: Annotated[int, Field(ge=256)] = Field(default=16 * 1024, alias="stringBytes")
    unreadable_code: Literal["read", "unjudged"] = Field(default="read", alias="unreadableCode")

    def command_too_long(self, command: str) -> str | None:
        """Why ``command`` is over ``commandBytes``, or ``None``."""
        if len(command) * 4 <= self.command_bytes:  # no UTF-8 character takes more than 4 bytes
            return None
        size = len(command.encode("utf-8", "surrogatepass"))
        if size <= self.command_bytes:
            return None
        return f"the command is {size} bytes, over the limit of {self.command_bytes} (hookbus.limits.commandBytes)"

    def too_many_subcommands(self, count: int) -> str | None:
        """Why a command of ``count`` simple commands cannot be judged, or ``None``."""
        if count <= self.subcommands:
            return None
        limit = self.subcommands
        return f"the command has {count} simple commands, over the limit of {limit} (hookbus.limits.subcommands)"

    def string_too_long(self, text: str) -> bool:
        """Whether ``text`` is over ``stringBytes`` (counted in characters, a lower bound of its bytes)."""
        return len(text) > self.string_bytes


DEFAULT_LIMITS: Final = Limits()


_CURRENT: Final[contextvars.ContextVar[Limits]] = contextvars.ContextVar("hookbus_limits", default=DEFAULT_LIMITS)


def current_limits() -> Limits:
    """The limits of the event being judged in this context (the defaults outside one)."""
    return _CURRENT.get()


@contextlib.contextmanager
def using_limits(limits: Limits) -> Iterator[None]:
    """Judge under ``limits`` inside the block (one event's evaluation)."""
    token = _CURRENT.set(limits)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def set_limits(limits: Limits) -> contextvars.Token[Limits]:
    """Judge under ``limits`` from now on in this context; returns the token for :func:`reset_limits`."""
    return _CURRENT.set(limits)


def reset_limits(token: contextvars.Token[Limits]) -> None:
    """Undo :func:`set_limits`."""
    _CURRENT.reset(token)


#: Up to this many bytes, :func:`json_depth_over` counts a JSON text's brackets before it walks.
COUNT_BRACKETS_BYTES: Final = 512


def depth_over(value: Any, limit: int) -> int | None:
    """The nesting depth of a parsed JSON value when it is over ``limit``, else ``None``.

    A scalar is depth 0, ``[]`` and ``{}`` depth 1. Iterative, and it stops at the first
    container past the limit, so the cost is at most the number of values.
    """
    if type(value) is not dict and type(value) is not list:
        return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            return depth
        children = container.values() if type(container) is dict else container
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                if child:
                    stack.append((child, depth + 1))
                elif depth + 1 > limit:
                    return depth + 1
    return None


def json_depth_over(raw: bytes, value: Any, limit: int) -> int | None:
    """:func:`depth_over` of ``value``, the parse of the JSON text ``raw``. A short text with no
    more brackets than ``limit`` cannot nest deeper: counted in C, it is not walked. A longer one
    is walked at once (counting a byte at a time costs more than walking its values: 17-23 µs for a
    24 KiB ``Write`` whose walk takes 0.7)."""
    if len(raw) <= COUNT_BRACKETS_BYTES and raw.count(b"[") + raw.count(b"{") <= limit:
        return None
    return depth_over(value, limit)


__all__ = [
    "COUNT_BRACKETS_BYTES",
    "DEFAULT_LIMITS",
    "INLINE_SPLIT_CHARS",
    "MAX_NESTING_DEPTH",
    "MAX_SUBCOMMANDS",
    "PATH_MAX_CHARS",
    "SPLIT_BUDGET_S",
    "Limits",
    "current_limits",
    "depth_over",
    "json_depth_over",
    "reset_limits",
    "set_limits",
    "using_limits",
]
