"""What session policy adds to a running dispatcher's CPU per event, end to end.

``bench/session_policy.py`` times the session's part of a decision in-process; this runs the
whole path: two stacks side by side on this host (each its own embedded Redis, one gateway and
one dispatcher), one with ``bench/session_policy.py``'s 100 plain ``rule`` handlers, the other
with the same handlers behind ``when:`` and the session policy (50 facts, 100 windowed
counters, 101 budgets). Each session of the second starts with the state of ``--history``
earlier events, written into its Redis as the settle script leaves it (every fact set,
counters busy). The load (``bench/harness.py``'s generator, ``--connections`` keep-alive
connections, calls spread over ``--sessions`` sessions, half of them answered ``ask`` by a
handler) goes to one stack at a time, the two in turn for ``--rounds`` pairs of
``--seconds`` each; each window's CPU seconds of the dispatcher (and of the gateway and
Redis), read from /proc, divided by the calls answered. ``--same`` runs the plain policy on
both stacks: the differences it reports are how far apart two equal stacks measure here.
Everything a dispatcher does for the session counts: the judge, its copy of the states, the
turns, the settle's arguments and answer, the record's ``facts`` and ``budgets``, and what a
slower stack changes (smaller settle batches at the same load).

    .venv/bin/python bench/session_dispatcher.py --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
import uvloop
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import CpuMeter, hook_caller, hook_input, saturate, start_roles, steady_rate, stop_roles
from session_policy import COMMANDS, history_state, policy_documents

from bus.policy.loading import policy_from_text
from bus.redis.keys import Keyspace
from hookbus.platform.redis_server import EmbeddedRedis, free_port

TENANT = "default"  # the gateway's tenant with no tokens configured


class Stack:
    """An embedded Redis, a gateway and a dispatcher deciding under one policy file."""

    def __init__(self, name: str, policy: Path, state_dir: Path) -> None:
        self.name, self.policy = name, policy
        self.redis = EmbeddedRedis(state_dir, persistent=False).start()
        self.port = free_port()
        self.roles = start_roles(self.redis.url, self.port, 1, policy)

    def meter(self) -> CpuMeter:
        pids = {"gateway": self.roles[0].pid, "dispatcher": self.roles[1].pid, "redis": self.redis.pid or 0}
        return CpuMeter(pids)

    def close(self) -> None:
        stop_roles(self.roles)
        self.redis.stop()


@contextlib.contextmanager
def stacks(documents: dict[str, dict[str, Any]]) -> Iterator[dict[str, Stack]]:
    with tempfile.TemporaryDirectory() as tmp:
        started: dict[str, Stack] = {}
        try:
            for name, document in documents.items():
                policy = Path(tmp) / f"{name}.yaml"
                policy.write_text(yaml.safe_dump(document))
                (Path(tmp) / name).mkdir()
                started[name] = Stack(name, policy, Path(tmp) / name)
            yield started
        finally:
            for stack in started.values():
                stack.close()


def seed_history(stack: Stack, sessions: list[str], events: int) -> int:
    """Write each session's state after ``events`` earlier calls into the stack's Redis, as the
    settle script leaves it; returns the state's fields."""
    policy = policy_from_text(stack.policy.read_text())
    state = history_state(policy, events)
    keys = Keyspace().with_partitions(policy.settings.streams.partitions)
    client = redis.Redis.from_url(stack.redis.url)
    now_ms = int(time.time() * 1000)
    for session in sessions:
        partition = keys.partition_of(session)
        key = keys.session_state(TENANT, session, partition)
        client.hset(key, mapping=dict(state.fields))
        client.pexpire(key, 86_400_000)
        client.zadd(keys.session_index(TENANT, partition), {key: now_ms})
    client.close()
    return len(state.fields)


def bodies(sessions: list[str], rules: int, count: int = 8192) -> list[bytes]:
    """Calls spread over ``sessions``: every other one a command a handler asks about."""
    rng = random.Random(3)
    made = []
    for i in range(count):
        command = rng.choice(COMMANDS) if i % 2 else f"tool{rng.randrange(rules)} x"
        made.append(hook_input(command, i, session=sessions[i % len(sessions)]))
    return made


async def window(
    stack: Stack, calls: list[bytes], connections: int, seconds: float, rate: float = 0
) -> tuple[int, dict[str, float]]:
    """Calls answered in one window of load (``rate`` calls a second, else as many as answered),
    and the CPU µs per call of each process."""
    meter = stack.meter()
    meter.start()
    if rate:
        done = len(await steady_rate(hook_caller(stack.port, calls), rate, seconds, connections))
    else:
        done, _, _ = await saturate(hook_caller(stack.port, calls), connections, seconds)
    meter.stop()
    return done, meter.per_request_us(done)


async def main(args: argparse.Namespace) -> None:
    base, gated = policy_documents(args.rules)
    sessions = [f"bench-session-{n}" for n in range(args.sessions)]
    calls = bodies(sessions, args.rules)
    with stacks({"plain": base, "session": base if args.same else gated}) as running:
        fields = 0 if args.same else seed_history(running["session"], sessions, args.history)
        for stack in running.values():  # warm both: caches, the states read once
            await window(stack, calls, args.connections, 2)
        rows: list[tuple[int, str, int, dict[str, float]]] = []
        for n in range(args.rounds):
            order = ["plain", "session"] if n % 2 == 0 else ["session", "plain"]
            for name in order:
                done, cpu = await window(running[name], calls, args.connections, args.seconds, args.rate)
                rows.append((n, name, done, cpu))
    what = f"{args.rules // 2} facts, {args.rules} windowed counters, {args.rules + 1} budgets"
    print(f"{args.rules} rule handlers; with session policy: {what}")
    print(f"{args.sessions} sessions of {args.history:,} earlier events ({fields} fields of state)")
    print(f"{args.connections} connections, {args.seconds:g} s per window, the stacks in turn\n")
    print("| round | policy | calls answered | dispatcher µs/call | gateway µs/call | Redis µs/call |")
    print("|---|---|---|---|---|---|")
    for n, name, done, cpu in rows:
        print(f"| {n + 1} | {name} | {done:,} | {cpu['dispatcher']:.1f} | {cpu['gateway']:.1f} | {cpu['redis']:.1f} |")
    added = [
        session[3]["dispatcher"] - plain[3]["dispatcher"]
        for plain, session in zip(
            [r for r in rows if r[1] == "plain"], [r for r in rows if r[1] == "session"], strict=True
        )
    ]
    print(
        f"\ndispatcher CPU added per call by the session policy, per round: {', '.join(f'{a:.1f}' for a in added)} µs"
    )
    print(f"median {statistics.median(added):.1f} µs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--history", type=int, default=10_000, help="earlier events of each session")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate", type=float, default=0, help="calls a second (default: as many as answered)")
    parser.add_argument(
        "--same", action="store_true", help="the plain policy on both stacks: how far apart two equal stacks measure"
    )
    uvloop.run(main(parser.parse_args()))
