"""GitHub Copilot CLI's dialect (``copilot``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class CopilotCli(Dialect):
    """GitHub Copilot CLI's hook format."""

    name = "copilot"
    title = "GitHub Copilot CLI"
    transport = "http"


__all__ = ["CopilotCli"]
