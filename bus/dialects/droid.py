"""Factory Droid's dialect (``droid``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class FactoryDroid(Dialect):
    """Factory Droid's hook format."""

    name = "droid"
    title = "Factory Droid"
    transport = "command"
    verified = ""


__all__ = ["FactoryDroid"]
