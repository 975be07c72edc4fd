"""hookbus workers: the dispatcher, the handlers it runs, and the arq worker of async hooks.

- :mod:`workers.dispatcher`: the dispatcher process (streams, answers, writes).
- :mod:`workers.engine`: evaluating one event against the policy.
- :mod:`workers.handlers`: the handler types.
- :mod:`workers.jobs`: async hooks on arq (enqueue, run, retry, dead letters).
- :mod:`workers.outbound`: outbound HTTP behind the SSRF guard.
"""
