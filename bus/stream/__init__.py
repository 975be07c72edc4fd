"""The stream protocol between gateways and dispatchers.

What a stream entry, a reply and a decision-log record hold (``protocol``), the one atomic step
that settles an event (``settle``), the bus's partitions (``partitions``) and the context that
``async`` hooks leave for a session's next turn (``pending_context``).

Imports: bus.errors, bus.hooks, bus.rules, bus.redis, bus.runtime, bus.policy, bus.session.
"""
