"""Cursor's dialect (``cursor``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class Cursor(Dialect):
    """Cursor's hook format."""

    name = "cursor"
    title = "Cursor"
    transport = "command"
    verified = ""


__all__ = ["Cursor"]
