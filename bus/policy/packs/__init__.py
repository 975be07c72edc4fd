"""Built-in policy packs: maintained sets of handlers that a policy includes by name.

A pack is a policy file shipped inside hookbus (``<name>.yaml`` next to this module) with a
``hooks`` section only. ``hookbus: {include: [dangerous-commands]}`` in a policy file adds the
pack's handlers before the file's own (:func:`bus.policy.loading.parse_policy_text`); the
policy's revision covers the pack's text, so an upgrade that changes a pack changes it.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def pack_names() -> tuple[str, ...]:
    """The names of the built-in packs, sorted."""
    found = resources.files(__name__).iterdir()
    return tuple(sorted(entry.name.removesuffix(".yaml") for entry in found if entry.name.endswith(".yaml")))


@functools.cache
def pack_text(name: str) -> str:
    """The text of the built-in pack ``name``; ``KeyError`` naming the known packs otherwise."""
    if name not in pack_names():
        raise KeyError(f"unknown pack {name!r} (known packs: {', '.join(pack_names())})")
    return resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")


def pack_sources(names: list[str]) -> list[tuple[str, str]]:
    """``(source, text)`` of each pack named: its handlers' source is ``pack:<name>``."""
    return [(f"pack:{name}", pack_text(name)) for name in names]


__all__ = ["pack_names", "pack_sources", "pack_text"]
