"""The decision-log records a gateway writes itself (inputs it refused), linked into their chain.

Every other record is written by a dispatcher's settle script; these are appended by
:data:`bus.stream.settle.APPEND_RECORD`, which links each into its partition's hash chain as
the settle script does (:mod:`bus.decisionlog.chain`). While Redis is down a record waits in
the spool, and is appended the same way when Redis is back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from bus.decisionlog.chain import record_digest
from bus.redis.connection import redis_errors
from bus.redis.keys import WORK_STREAM_MAXLEN, Keyspace
from bus.redis.topology import PartitionClients
from bus.stream.protocol import LogRecord, StreamFields
from bus.stream.settle import APPEND_RECORD


class RecordWriter:
    """Appends records to the decision log, each linked into its partition's chain."""

    def __init__(self, redis: aioredis.Redis, keys: Keyspace, redis_url: str, clients: PartitionClients) -> None:
        self.keys = keys
        self.redis_url = redis_url
        self.clients = clients
        self._script = redis.register_script(APPEND_RECORD)
        #: Each partition's decision log, and its partition (what the spool hands back).
        self.logs = {keys.decision_log(partition): partition for partition in keys.all_partitions}

    def partition_of(self, record: LogRecord) -> int:
        return self.keys.partition_of(record.session_id) if record.session_id else 0

    async def append(self, record: LogRecord) -> None:
        """Append ``record`` to its partition's log; BusUnavailable while Redis is away."""
        partition = self.partition_of(record)
        keys = [self.keys.decision_log(partition), self.keys.decision_chain(partition)]
        args: list[Any] = [WORK_STREAM_MAXLEN, record.meta(), record.payload, record.outcome, record.fail_open]
        with redis_errors(self.redis_url):
            await self._script(keys, [*args, partition, record_digest(record)], client=self.clients.get(partition))

    async def append_spooled(self, fields: StreamFields) -> None:
        """Append a record the spool held (its :meth:`LogRecord.encode` fields)."""
        raw: Mapping[bytes, bytes] = {
            name.encode(): value if isinstance(value, bytes) else str(value).encode() for name, value in fields.items()
        }
        await self.append(LogRecord.decode(raw))


__all__ = ["RecordWriter"]
