"""hookbus: a central hook platform for fleets of Claude Code-style coding agents.

The shared core, one room per concept (each package's docstring says what it owns and what
it may import; ``tests/test_layout.py`` holds them to it):

- :mod:`bus.hooks`: Claude Code's hook semantics (events, matchers, output, merging).
- :mod:`bus.rules`: permission rules and the shell reading behind them.
- :mod:`bus.redaction`: masking secrets before anything is stored.
- :mod:`bus.redis`: Redis plumbing and the whole keyspace.
- :mod:`bus.runtime`: settings, metrics, logs, retries: what every process runs on.
- :mod:`bus.policy`: policy files and their distribution.
- :mod:`bus.dialects`: every other agent's hook format, translated to Claude Code's.
- :mod:`bus.stream`: the stream protocol between gateways and dispatchers.
- :mod:`bus.decisionlog`: the decision log read back.
- :mod:`bus.errors`: the one exception hierarchy.

This package is kept import-light on purpose: ``hookbus hook`` runs on every tool call of
every agent, so importing :mod:`bus` must not pull in pydantic, redis or httpx.
"""

__version__ = "0.1.0"
