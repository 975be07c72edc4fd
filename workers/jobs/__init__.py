"""Async (fire-and-forget) hooks on arq: enqueued by dispatchers, run by the worker, retried, dead-lettered.

``enqueue`` puts a job on arq, ``worker`` is the arq worker that runs it, ``leased`` gives arq a
short renewed lease and batched claims, ``delivery`` decides when a failed job is tried again,
and ``deadletters`` keeps what was given up.

Imports: bus, workers.handlers, workers.outbound, workers.services.
"""
