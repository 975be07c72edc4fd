"""Kiro's dialect (``kiro``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class Kiro(Dialect):
    """Kiro's hook format."""

    name = "kiro"
    title = "Kiro"
    transport = "command"
    verified = ""


__all__ = ["Kiro"]
