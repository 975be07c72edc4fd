"""What every hookbus process runs on: settings, metrics, logs, retries, child processes, the SSRF guard.

``settings`` are built once from ``HOOKBUS_*`` variables and flags and passed down; ``metrics``
holds every Prometheus family; ``logs`` formats every process's log lines; ``retry`` is the one
retry curve; ``children`` keeps child processes from outliving their parent; ``ssrf`` guards
every outbound request.

Imports: bus.errors, bus.hooks, bus.redis.
"""
