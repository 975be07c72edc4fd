"""Cline's dialect (``cline``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class Cline(Dialect):
    """Cline's hook format."""

    name = "cline"
    title = "Cline"
    transport = "command"
    verified = ""


__all__ = ["Cline"]
