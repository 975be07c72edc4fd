"""The floor: a bare Redis Streams request/reply echo server, no HTTP, no policy.

Run as a separate process like a dispatcher: read batches from a consumer group, PUBLISH a
fixed reply per entry and XACK, pipelined per batch. ``python bench/floor_server.py URL``.
"""

from __future__ import annotations

import sys

import redis.asyncio as aioredis
import uvloop

STREAM, GROUP = "floor:requests", "floor"
REPLY = b'{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'


async def main(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except aioredis.ResponseError:
        pass
    while True:
        response = await client.xreadgroup(GROUP, "echo", {STREAM: ">"}, count=128, block=1000)
        for _, entries in response or ():
            async with client.pipeline(transaction=False) as pipe:
                for entry_id, fields in entries:
                    pipe.publish(fields[b"rp"], fields[b"id"] + b"|" + REPLY)
                    pipe.xack(STREAM, GROUP, entry_id)
                await pipe.execute()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1]))
