"""OpenCode's dialect (``opencode``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class OpenCode(Dialect):
    """OpenCode's hook format."""

    name = "opencode"
    title = "OpenCode"
    transport = "plugin"
    verified = ""


__all__ = ["OpenCode"]
