"""Qwen Code's dialect (``qwen``). To be written: events, fields and tool names both ways."""

from __future__ import annotations

from bus.dialects.base import Dialect


class QwenCode(Dialect):
    """Qwen Code's hook format."""

    name = "qwen"
    title = "Qwen Code"
    transport = "http"


__all__ = ["QwenCode"]
