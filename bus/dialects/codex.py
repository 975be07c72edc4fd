"""Codex CLI's dialect (``codex``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class CodexCli(Dialect):
    """Codex CLI's hook format."""

    name = "codex"
    title = "Codex CLI"
    transport = "command"


__all__ = ["CodexCli"]
