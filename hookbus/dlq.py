"""``hookbus dlq``: the async hooks that were given up — list them, look at one, replay, purge.

``list [--tenant T] [--handler H] [--since T] [--limit N] [--json]`` shows one line per dead
letter (oldest first); ``show ID`` the whole letter as JSON (the masked event, every try with
its time and error); ``replay ID... | --all [filters]`` queues each again as a fresh job with
the same ``webhook-id`` and removes it from the stream (a replay that fails again comes back
as a new letter); ``purge [ID...] --yes`` deletes letters (every one without IDs). The store
itself is :mod:`workers.jobs.deadletters`. The letters are where the worker writes them, on the
async queue's Redis: its own (``--queue-redis-url``, ``HOOKBUS_QUEUE_REDIS_URL``; a
``redis+sentinel://`` URL too) when it has one, else the bus's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TextIO

import redis.asyncio as aioredis

from bus.errors import ConfigError, HookBusError
from bus.redis.connection import connect, redis_errors
from bus.redis.entries import is_entry_id
from bus.redis.keys import Keyspace
from bus.runtime.settings import comma_list
from bus.stream.protocol import iso_time
from workers.jobs import deadletters
from workers.jobs.deadletters import DeadLetter, Filters
from workers.jobs.enqueue import arq_pool

_ERROR_CHARS = 80


def filters_of(args: argparse.Namespace) -> Filters:
    """The ``--tenant``/``--handler``/``--since`` flags as :class:`~workers.jobs.deadletters.Filters`."""
    from hookbus.replay.run import parse_time

    since = getattr(args, "since", None)
    return Filters(
        tenants=frozenset(comma_list(getattr(args, "tenant", None))),
        handlers=frozenset(comma_list(getattr(args, "handler", None))),
        since_ms=parse_time(since) if since else None,
    )


def _entry_ids(ids: list[str]) -> list[str]:
    for entry_id in ids:
        if not is_entry_id(entry_id):
            raise ConfigError(
                f"{entry_id!r} is not a dead-letter id (they look like 1712345678901-0; see 'hookbus dlq list')"
            )
    return ids


def line(letter: DeadLetter) -> str:
    """One row of ``dlq list``."""
    error = " ".join(letter.reason.split())
    if len(error) > _ERROR_CHARS:
        error = error[: _ERROR_CHARS - 3] + "..."
    handler = f"{letter.handler_type or '?'}:{letter.handler_id}"
    return (
        f"{letter.entry_id:<16} {iso_time(letter.dead_ms)[:19]}  {letter.tenant:<10} {letter.event:<16} "
        f"{handler:<24} {len(letter.attempts):>5}  {letter.why:<13} {error}"
    )


HEADER = (
    f"{'ID':<16} {'DEAD AT (UTC)':<19}  {'TENANT':<10} {'EVENT':<16} {'HANDLER':<24} {'TRIES':>5}  "
    f"{'WHY':<13} LAST ERROR"
)


async def _letters(redis: aioredis.Redis, keys: Keyspace, ids: list[str]) -> list[DeadLetter]:
    found = [await deadletters.get(redis, keys, entry_id) for entry_id in _entry_ids(ids)]
    missing = [entry_id for entry_id, letter in zip(ids, found, strict=True) if letter is None]
    if missing:
        raise HookBusError(f"no dead letter {', '.join(missing)} (see 'hookbus dlq list'); nothing replayed")
    return [letter for letter in found if letter is not None]


async def run_dlq(args: argparse.Namespace, keys: Keyspace, redis_url: str, out: TextIO = sys.stdout) -> int:
    """Run one ``hookbus dlq`` action on the queue's Redis at ``redis_url``; returns the exit code."""
    redis = connect(redis_url, connect_timeout_s=5.0, socket_timeout_s=10.0)  # a CLI can wait
    try:
        with redis_errors(redis_url):
            return await _act(args, keys, redis, redis_url, out)
    finally:
        await redis.aclose()


async def _act(args: argparse.Namespace, keys: Keyspace, redis: aioredis.Redis, redis_url: str, out: TextIO) -> int:
    action = args.dlq_command
    if action == "list":
        shown = 0
        if not args.json:
            print(HEADER, file=out)
        async for letter in deadletters.scan(redis, keys, filters_of(args), args.limit):
            print(json.dumps(letter.to_json()) if args.json else line(letter), file=out)
            shown += 1
        if not args.json:
            total = await deadletters.size(redis, keys)
            print(
                f"{shown} dead letter{'s' if shown != 1 else ''} shown ({total} in {keys.async_dead_letters})", file=out
            )
        return 0
    if action == "show":
        found = await deadletters.get(redis, keys, _entry_ids([args.id])[0])
        if found is None:
            raise HookBusError(f"no dead letter {args.id} (see 'hookbus dlq list')")
        print(json.dumps(found.to_json(), indent=2), file=out)
        return 0
    if action == "replay":
        if bool(args.ids) == bool(args.all):
            raise ConfigError("name the dead letters to replay (IDs) or pass --all, not both")
        if args.ids and (args.tenant or args.handler or args.since):
            raise ConfigError("--tenant, --handler and --since select letters for --all; with IDs leave them out")
        if args.all:
            letters = [letter async for letter in deadletters.scan(redis, keys, filters_of(args))]
        else:
            letters = await _letters(redis, keys, args.ids)
        arq = arq_pool(redis_url, max_connections=2)
        try:
            replayed = await deadletters.replay(arq, keys, letters)
        finally:
            await arq.aclose()
        for done in replayed:
            how = "queued as" if done.queued else "already under way as"
            print(
                f"{done.letter.entry_id}: {how} job {done.job_id} (webhook-id "
                f"{done.letter.event_id}:{done.letter.handler_id})",
                file=out,
            )
        print(f"{len(replayed)} dead letter{'s' if len(replayed) != 1 else ''} replayed", file=out)
        return 0
    if action == "purge":
        ids = _entry_ids(args.ids) if args.ids else None
        count = len(ids) if ids is not None else await deadletters.size(redis, keys)
        if not args.yes:
            print(
                f"hookbus: this deletes {count} dead letter{'s' if count != 1 else ''} for good; pass --yes to do it",
                file=sys.stderr,
            )
            return 1
        deleted = await deadletters.purge(redis, keys, ids)
        print(f"{deleted} dead letter{'s' if deleted != 1 else ''} deleted", file=out)
        return 0
    raise ConfigError(f"unknown dlq action {action!r}")


def dlq_command(args: argparse.Namespace, keys: Keyspace, redis_url: str) -> int:
    """``hookbus dlq ...`` from the command line."""
    return asyncio.run(run_dlq(args, keys, redis_url))


__all__ = ["HEADER", "dlq_command", "filters_of", "line", "run_dlq"]
