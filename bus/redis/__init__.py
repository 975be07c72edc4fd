"""Redis plumbing: connections, URLs, the keyspace, auto-pipelining, and the bearer tokens kept in Redis.

``connection`` is the one place where redis-py's errors become hookbus's (:class:`~bus.errors.BusUnavailable`);
``topology`` says, once per role, whether the bus is a single Redis or a Redis Cluster and what differs;
``keys`` spells every key hookbus uses, so nothing else writes a key name; ``urls`` reads and masks
Redis URLs (cluster seeds, Sentinel); ``autopipeline`` lets concurrent calls share one round
trip; ``tokens`` holds the bearer tokens that gateways check; ``entries`` reads stream entry ids.

Imports: bus.errors.
"""
