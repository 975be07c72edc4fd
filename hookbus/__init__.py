"""hookbus: a central hook platform for fleets of Claude Code-style coding agents.

This package is what users touch: the command line, ``hookbus up``, ``tail``, the shim, the
installer and the Python SDK::

    from hookbus import HookBusClient

    with HookBusClient("http://127.0.0.1:8787") as client:
        decision = client.emit("PreToolUse", tool_name="Bash", tool_input={"command": "ls"})

Importing it is cheap on purpose: ``hookbus hook`` runs on every tool call of every agent,
so the SDK (and httpx with it) is loaded only when one of its names is first used.
"""

from __future__ import annotations

from bus import __version__

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every hook
if TYPE_CHECKING:
    from hookbus.client import AsyncHookBusClient, Decision, HookBusClient
    from hookbus.local_hooks import LocalHooks

_LAZY = {
    "AsyncHookBusClient": "hookbus.client",
    "Decision": "hookbus.client",
    "HookBusClient": "hookbus.client",
    "LocalHooks": "hookbus.local_hooks",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hookbus' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["AsyncHookBusClient", "Decision", "HookBusClient", "LocalHooks", "__version__"]
