"""The dispatcher process: read the work streams, answer each event, write what it decided.

``answering`` says what each event means and its answer, ``streams`` reads, claims, dead-letters
and trims the work streams, ``outbox`` coalesces the writes into pipelined round trips, and
``service`` runs the process.

Imports: bus, workers.engine, workers.handlers, workers.jobs, workers.outbound, workers.services.
"""
