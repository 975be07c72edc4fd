"""Reading a handler's answer: stdout / response-body parsing and per-event output checks.

(Being written; see the function docstrings for the contract.)
"""

from __future__ import annotations

from typing import Any

from bus.results import HandlerResult


def result_from_exit(event: str, exit_code: int, stdout: str, stderr: str) -> HandlerResult:
    """Turn a finished command's exit code, stdout and stderr into a HandlerResult (spec §4.1, §4.2)."""
    raise NotImplementedError


def result_from_body(event: str, body: str) -> HandlerResult:
    """Turn a 2xx http/mcp_tool text answer into a HandlerResult, parsed like exit-0 stdout."""
    raise NotImplementedError


def check_output(event: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Validate a JSON output object for ``event``; return it cleaned (fields valid for the event)."""
    raise NotImplementedError
