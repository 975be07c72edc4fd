"""``hookbus dlq``, run as the real command against the suite's Redis: list and its filters, show,
replay (by id, ``--all`` with filters), purge, and the errors people make."""

from __future__ import annotations

import json

import orjson

from bus.redaction.redact import DEFAULT
from bus.stream.protocol import Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, run_hookbus
from workers.jobs import deadletters
from workers.jobs.deadletters import Attempt


async def seed(
    bus: BusProbe,
    *,
    tenant: str = "default",
    handler_id: str = "a1b2c3d4e5f60718",
    handler_type: str = "http",
    n: int = 0,
) -> str:
    hook_input = {"hook_event_name": "Notification", "session_id": f"s-{n}", "message": f"hello {n}"}
    request = Request(f"ev-{n}", "Notification", tenant, orjson.dumps(hook_input), now_ms())
    attempts = [
        Attempt(1, now_ms(), "error", "http hook answered HTTP 503", True, 12, 1500),
        Attempt(2, now_ms(), "error", "http hook answered HTTP 503", True, 10),
    ]
    letter = deadletters.letter_of(
        request,
        hook_input,
        DEFAULT,
        job_id=f"ev-{n}:{handler_id}",
        handler_id=handler_id,
        handler_type=handler_type,
        why="out_of_tries",
        attempts=attempts,
    )
    return await deadletters.bury(bus.redis, bus.keys, letter)


async def test_list_shows_one_line_per_letter_and_filters_by_tenant_and_handler(bus: BusProbe, redis_url: str) -> None:
    first = await seed(bus, n=1)
    second = await seed(bus, tenant="acme", handler_type="command", handler_id="ffff000011112222", n=2)
    listed = run_hookbus("dlq", "list", "--redis-url", redis_url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("ID") and "LAST ERROR" in lines[0]
    assert lines[1].startswith(first) and "http:a1b2c3d4e5f60718" in lines[1] and "HTTP 503" in lines[1]
    assert lines[2].startswith(second)
    assert lines[-1] == "2 dead letters shown (2 in hookbus:async:dead)"
    only = run_hookbus("dlq", "list", "--tenant", "acme", "--json", "--redis-url", redis_url)
    assert [json.loads(line)["id"] for line in only.stdout.splitlines()] == [second]
    by_handler = run_hookbus("dlq", "list", "--handler", "a1b2", "--json", "--redis-url", redis_url)
    assert [json.loads(line)["id"] for line in by_handler.stdout.splitlines()] == [first]
    by_type = run_hookbus("dlq", "list", "--handler", "command", "--json", "--redis-url", redis_url)
    assert [json.loads(line)["handler"]["type"] for line in by_type.stdout.splitlines()] == ["command"]
    later = run_hookbus("dlq", "list", "--since", "now", "--json", "--redis-url", redis_url)
    assert later.returncode == 0 and later.stdout == ""


async def test_show_prints_the_whole_letter(bus: BusProbe, redis_url: str) -> None:
    entry = await seed(bus, n=3)
    shown = run_hookbus("dlq", "show", entry, "--redis-url", redis_url)
    assert shown.returncode == 0, shown.stderr
    letter = json.loads(shown.stdout)
    assert letter["input"]["message"] == "hello 3"
    assert [a["try"] for a in letter["attempts"]] == [1, 2] and letter["attempts"][0]["retry_in_ms"] == 1500
    assert (letter["why"], letter["handler"]["type"], letter["replays"]) == ("out_of_tries", "http", 0)


async def test_unknown_and_malformed_ids_are_clear_errors(bus: BusProbe, redis_url: str) -> None:
    missing = run_hookbus("dlq", "show", "1-0", "--redis-url", redis_url)
    assert (missing.returncode, missing.stderr.strip()) == (1, "hookbus: no dead letter 1-0 (see 'hookbus dlq list')")
    bad = run_hookbus("dlq", "replay", "ev-1", "--redis-url", redis_url)
    assert bad.returncode == 1 and "is not a dead-letter id" in bad.stderr and "Traceback" not in bad.stderr
    entry = await seed(bus, n=4)
    partly = run_hookbus("dlq", "replay", entry, "2-0", "--redis-url", redis_url)
    assert partly.returncode == 1 and "no dead letter 2-0" in partly.stderr and "nothing replayed" in partly.stderr
    assert await deadletters.size(bus.redis, bus.keys) == 1
    both = run_hookbus("dlq", "replay", entry, "--all", "--redis-url", redis_url)
    assert both.returncode == 1 and "not both" in both.stderr


async def test_replay_queues_a_fresh_job_with_a_new_id_and_removes_the_letter(bus: BusProbe, redis_url: str) -> None:
    kept = await seed(bus, tenant="acme", n=5)
    await seed(bus, n=6)
    replayed = run_hookbus("dlq", "replay", "--all", "--tenant", "default", "--redis-url", redis_url)
    assert replayed.returncode == 0, replayed.stderr
    assert "queued as job ev-6:a1b2c3d4e5f60718:r1" in replayed.stdout
    assert "1 dead letter replayed" in replayed.stdout
    assert [m.decode() for m in await bus.redis.zrange(bus.keys.arq_queue, 0, -1)] == ["ev-6:a1b2c3d4e5f60718:r1"]
    assert [letter.entry_id async for letter in deadletters.scan(bus.redis, bus.keys)] == [kept]


async def test_purge_needs_yes(bus: BusProbe, redis_url: str) -> None:
    first = await seed(bus, n=7)
    await seed(bus, n=8)
    refused = run_hookbus("dlq", "purge", "--redis-url", redis_url)
    assert refused.returncode == 1 and "deletes 2 dead letters" in refused.stderr
    assert await deadletters.size(bus.redis, bus.keys) == 2
    one = run_hookbus("dlq", "purge", first, "--yes", "--redis-url", redis_url)
    assert one.stdout.strip() == "1 dead letter deleted"
    rest = run_hookbus("dlq", "purge", "--yes", "--redis-url", redis_url)
    assert rest.stdout.strip() == "1 dead letter deleted", (rest.returncode, rest.stderr)
    assert await deadletters.size(bus.redis, bus.keys) == 0


async def test_a_letter_keeps_the_policy_versions_its_event_ran_under_for_the_replay(bus: BusProbe) -> None:
    hook_input = {"hook_event_name": "Notification", "session_id": "s-v", "message": "x"}
    request = Request("ev-v", "Notification", "acme", orjson.dumps(hook_input), now_ms(), policy="org3|acme7")
    letter = deadletters.letter_of(
        request,
        hook_input,
        DEFAULT,
        job_id="ev-v:h",
        handler_id="h",
        handler_type="http",
        why="not_retryable",
        attempts=[Attempt(1, now_ms(), "error", "HTTP 404", False)],
    )
    stored = await deadletters.get(bus.redis, bus.keys, await deadletters.bury(bus.redis, bus.keys, letter))
    assert stored is not None and stored.request().policy == "org3|acme7"
    assert stored.request().payload == request.payload and stored.reason == "HTTP 404"


async def test_with_a_queue_redis_of_its_own_dlq_lists_shows_replays_and_purges_there(
    bus: BusProbe, redis_url: str, private_redis: EmbeddedRedis
) -> None:
    queue = BusProbe(private_redis.url)
    try:
        on_bus = await seed(bus, n=20)  # not where the worker of such a platform writes: left alone
        first, second = await seed(queue, n=21), await seed(queue, n=22)
        listed = run_hookbus(
            "dlq", "list", "--json", "--redis-url", redis_url, HOOKBUS_QUEUE_REDIS_URL=private_redis.url
        )
        assert listed.returncode == 0, listed.stderr
        assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [first, second]
        shown = run_hookbus("dlq", "show", first, "--queue-redis-url", private_redis.url)  # no bus URL needed
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["input"]["message"] == "hello 21"
        replayed = run_hookbus("dlq", "replay", first, "--queue-redis-url", private_redis.url)
        assert "queued as job ev-21:a1b2c3d4e5f60718:r1" in replayed.stdout, replayed.stderr
        assert await queue.redis.zcard(queue.keys.arq_queue) == 1
        assert await bus.redis.zcard(bus.keys.arq_queue) == 0
        purged = run_hookbus("dlq", "purge", "--yes", "--queue-redis-url", private_redis.url)
        assert purged.stdout.strip() == "1 dead letter deleted", purged.stderr
        assert await deadletters.size(queue.redis, queue.keys) == 0
        assert [letter.entry_id async for letter in deadletters.scan(bus.redis, bus.keys)] == [on_bus]
    finally:
        await queue.close()


def test_on_a_cluster_bus_without_a_queue_redis_dlq_says_what_to_set(redis_url: str) -> None:
    refused = run_hookbus("dlq", "list", "--redis-url", redis_url, HOOKBUS_REDIS_CLUSTER="1")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith(
        "hookbus: the async queue (arq) cannot run on a Redis Cluster: set "
        "HOOKBUS_QUEUE_REDIS_URL to a single Redis (redis://, rediss:// or unix://) "
        "or to its Sentinels (redis+sentinel://"
    )
    malformed = run_hookbus("dlq", "list", "--queue-redis-url", "redis+sentinel://s1:26379")
    assert malformed.returncode == 1 and malformed.stderr.count("\n") == 1
    assert "HOOKBUS_QUEUE_REDIS_URL is not a valid Sentinel URL: the service name" in malformed.stderr
