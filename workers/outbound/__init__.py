"""Outbound HTTP of dispatchers and workers, always behind the SSRF guard.

``client`` is the process's one client, ``transport`` and ``h1`` its pool of HTTP/1.1
connections, ``webhooks`` signs http hook requests (Standard Webhooks) and ``llm`` talks to the
Anthropic Messages API for ``prompt`` and ``agent`` hooks.

Imports: bus, workers.services.
"""
