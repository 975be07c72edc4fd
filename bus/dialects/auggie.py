"""Augment Auggie's dialect (``auggie``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class Auggie(Dialect):
    """Augment Auggie's hook format."""

    name = "auggie"
    title = "Augment Auggie"
    transport = "command"
    verified = ""


__all__ = ["Auggie"]
