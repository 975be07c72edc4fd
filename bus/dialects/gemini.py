"""Gemini CLI's dialect (``gemini``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class GeminiCli(Dialect):
    """Gemini CLI's hook format."""

    name = "gemini"
    title = "Gemini CLI"
    transport = "command"


__all__ = ["GeminiCli"]
