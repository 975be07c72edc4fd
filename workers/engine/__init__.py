"""Evaluating one event against the policy: select the handlers, run them concurrently, merge, guard.

``evaluation`` is the engine, ``judging`` works out what an event's input can be judged on
before its handlers run, and ``contextpops`` pipelines the pending-context pops of one batch.

Imports: bus, workers.handlers, workers.jobs, workers.services.
"""
