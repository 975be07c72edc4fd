"""The freeze: a manual (or automatic) kill switch on a tenant's tools, obeyed by every node.

``freezes`` says what a freeze is (a tenant, the tool matchers it covers, who set it, since and
until when, why) and what a frozen event is answered; ``store`` sets, lifts and lists freezes in
Redis; ``cache`` keeps every node's copy of them fresh (one read every
:data:`~bus.freeze.cache.POLL_S` seconds, never one per decision).

Imports: bus.errors, bus.hooks, bus.redis, bus.runtime.
"""
