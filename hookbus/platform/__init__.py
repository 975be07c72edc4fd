"""``hookbus up``: the whole platform in one foreground process.

With its state folder (``state``), its embedded Redis (``redis_server``) and the policy checks
that need this machine (``preflight``).

Imports: bus, gateway.server.
"""
