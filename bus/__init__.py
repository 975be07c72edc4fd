"""hookbus: a central hook platform for fleets of Claude Code-style coding agents.

This package is kept import-light on purpose: ``hookbus hook`` runs on every tool call of
every agent, so importing :mod:`bus` must not pull in pydantic, redis or httpx.
"""

__version__ = "0.1.0"
