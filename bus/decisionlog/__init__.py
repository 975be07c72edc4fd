"""The decision log read back: ranges merged across partitions, audit windows and filters, records made fit to store.

``reader`` reads the partitioned log as one log and follows it live, ``audit`` gives windows,
filters and consumer-group state to every reader (``hookbus tail``, ``hookbus audit``, the
gateway's export and stream), ``masking`` masks a record before the dispatcher writes it,
``ocsf`` writes a record as an OCSF event, ``parquet`` writes records to the audit archive's
Parquet files (``archiverows`` makes their rows, ``archivebatch`` a read's rows at once) and
``archivesql`` queries the archive and the log's unarchived tail with DuckDB,
read-only (both need ``hookbus[archive]``), and ``chain`` and ``checkpoints`` check each
partition's hash chain of records and sign its head.

Imports: bus.errors, bus.hooks, bus.policy, bus.redaction, bus.redis, bus.runtime, bus.stream.
"""
