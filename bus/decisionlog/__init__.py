"""The decision log read back: ranges merged across partitions, audit windows and filters, records made fit to store.

``reader`` reads the partitioned log as one log and follows it live, ``audit`` gives windows,
filters and consumer-group state to every reader (``hookbus tail``, ``hookbus audit``, the
gateway's export and stream), ``masking`` masks a record before the dispatcher writes it, and
``ocsf`` writes a record as an OCSF event.

Imports: bus.errors, bus.hooks, bus.redaction, bus.redis, bus.runtime, bus.stream.
"""
