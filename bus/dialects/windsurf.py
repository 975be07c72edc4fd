"""Windsurf (Cascade)'s dialect (``windsurf``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class Windsurf(Dialect):
    """Windsurf (Cascade)'s hook format."""

    name = "windsurf"
    title = "Windsurf (Cascade)"
    transport = "command"
    verified = ""


__all__ = ["Windsurf"]
