"""hookbus on a Redis Cluster against a single Redis, in one run: ``python bench/cluster.py``.

Blocking PreToolUse decisions with the example ``rule`` policy (``examples/policy.yaml``, its
PreToolUse deadline set to ``--deadline-s``); each platform is one gateway and two dispatcher
processes. Four platforms run at once, each under a key prefix of its own: **single** (a
single Redis 7, 1 partition) and **cluster 1p / 2p / 4p** (the local cluster of
``tests/redis_cluster.py``: 3 masters, 3 replicas; 1, 2 and 4 partitions). Load goes to one
platform at a time, in interleaved rounds, so that whatever else loads the machine loads
every platform alike; the idle platforms cost little (blocked reads, a heartbeat).

1. **Closed loop**: ``--agents`` agents back to back, ``--rounds`` rounds of
   ``--closed-s``/rounds seconds per platform (single, cluster 1p, cluster 4p): decisions/s,
   p50/p99, fail-opens, CPU per decision of each process, and what Redis did per decision
   (``bench/redis_cost.py``), per master.
2. **Same load per partition**: open loop at ``--rate-per-partition`` times the partitions on every
   platform; the cost per decision should not grow with the partitions.
3. **Failover** (the other platforms stopped first): open loop at ``--failover-rate`` on
   cluster 4p; the master holding partition 0 is killed at ``--kill-at-s`` and restarted at
   the end. Twice: with Redis's default ``cluster-require-full-coverage yes`` (every slot refused
   while one is uncovered) and with ``no`` (the local cluster's setting, and a bus's).

Replies on the cluster go by sharded Pub/Sub (``SPUBLISH`` on a partition's channel, the
gateway's ``SSUBSCRIBE`` on its master); a calibration before the load times ``SPUBLISH`` on
its master against a classic ``PUBLISH`` crossing the cluster bus.

Everything runs on 127.0.0.1 with Debian's redis-server 7 (the single Redis on TCP like the
nodes); the async queue of the cluster platforms is a Redis of its own
(``HOOKBUS_QUEUE_REDIS_URL``). Results: ``bench/results/cluster.json``, and a Markdown block
on stdout (``bench/cluster_report.py``). Every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import redis
import uvloop
import yaml
from redis.crc import key_slot

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis_cost
from cluster_load import analyse_failover, closed_loop, make_bodies, publish_latency, steady
from cluster_report import markdown
from harness import CpuMeter
from mixed import open_loop, stop_all
from plain_redis import PlainRedis

from bus.redis.keys import Keyspace
from bus.runtime.children import kill_with_parent
from hookbus.platform.redis_server import free_port
from tests.redis_cluster import LocalCluster, find_cluster_binaries

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


@dataclasses.dataclass
class Platform:
    """One gateway and its dispatchers under one key prefix, on a single Redis or on the cluster."""

    name: str
    keys: Keyspace
    port: int
    processes: list[subprocess.Popen[bytes]]
    single: PlainRedis | None = None
    cluster: LocalCluster | None = None

    @property
    def partitions(self) -> int:
        return self.keys.partitions

    def pids(self) -> dict[str, int]:
        return {"gateway": self.processes[0].pid, **{f"dispatcher{n}": p.pid for n, p in enumerate(self.processes[1:])}}

    def redis_ports(self) -> list[int]:
        if self.cluster is not None:
            return [node.port for node in self.cluster.nodes]
        assert self.single is not None
        return [self.single.port]

    def reply_nodes(self) -> list[int]:
        """The nodes that hold one of the gateway's reply subscriptions: classic on a single Redis,
        sharded (one per partition) on a cluster (``PUBSUB CHANNELS`` and ``SHARDCHANNELS`` are per node)."""
        found = []
        for port in self.redis_ports():
            with redis.Redis(port=port) as client:
                classic = client.pubsub_channels(f"{self.keys.prefix}reply:*")
                sharded = client.execute_command("PUBSUB", "SHARDCHANNELS", f"{self.keys.prefix}*reply:*")
                if classic or sharded:
                    found.append(port)
        return found

    def master_of(self, partition: int) -> int:
        if self.cluster is None:
            assert self.single is not None
            return self.single.port
        return self.cluster.master_for_key(self.keys.blocking_stream(partition)).port


def write_policy(folder: Path, name: str, partitions: int, deadline_s: float) -> Path:
    """``examples/policy.yaml`` with ``partitions`` partitions and a PreToolUse deadline of ``deadline_s``."""
    policy = yaml.safe_load((ROOT / "examples" / "policy.yaml").read_text())
    policy["hookbus"]["streams"] = {"partitions": partitions}
    policy["hookbus"].setdefault("deadlines", {})["PreToolUse"] = deadline_s
    path = folder / f"policy-{name}.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def start_platform(
    name: str,
    prefix: str,
    partitions: int,
    args: argparse.Namespace,
    logs: Path,
    *,
    single: PlainRedis | None = None,
    cluster: LocalCluster | None = None,
    queue_url: str | None = None,
) -> Platform:
    """Start one gateway and ``args.dispatchers`` dispatchers; return once the gateway is ready."""
    policy = write_policy(logs, name.replace(" ", "-"), partitions, args.deadline_s)
    env = {key: value for key, value in os.environ.items() if not key.startswith("HOOKBUS_")}
    env |= {"HOOKBUS_KEY_PREFIX": prefix, "HOOKBUS_LOG_LEVEL": "warning"}
    if cluster is not None:
        env |= {"HOOKBUS_REDIS_URL": cluster.seed_url, "HOOKBUS_REDIS_CLUSTER": "1"}
    else:
        assert single is not None
        env["HOOKBUS_REDIS_URL"] = single.url
    if queue_url:
        env["HOOKBUS_QUEUE_REDIS_URL"] = queue_url
    port = free_port()
    processes: list[subprocess.Popen[bytes]] = []
    platform_ = Platform(name, Keyspace(prefix).with_partitions(partitions), port, processes, single, cluster)
    roles = [("gateway", ["--port", str(port)])] + [("dispatcher", [])] * args.dispatchers
    try:
        for role, extra in roles:
            log = (logs / f"{name.replace(' ', '-')}-{role}{len(processes)}.log").open("ab")
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "hookbus", role, "--config", str(policy), *extra],
                    env=env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=kill_with_parent,
                )
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).json()
                if ready["ready"] and ready["checks"]["dispatchers"]["alive"] >= args.dispatchers:
                    return platform_
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"platform {name} did not become ready; see {logs}")
            time.sleep(0.1)
    except BaseException:
        stop_all(processes)
        raise


async def measured(target: Platform, load: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """Run ``load`` against ``target`` and add what its processes and the Redis nodes spent on it."""
    ports = target.redis_ports()
    on_cluster = target.cluster is not None
    holds: dict[int, list[int]] = collections.defaultdict(list)
    for part in range(target.partitions):
        holds[target.master_of(part)].append(part)
    before = redis_cost.sample(ports, on_cluster)
    buses = redis_cost.bus_ports(ports[0]) if on_cluster else set()
    bus_before = redis_cost.bus_bytes_sent(buses) if on_cluster else None
    meter = CpuMeter(
        {**target.pids(), "load generator": os.getpid(), **{f"redis:{port}": s.pid for port, s in before.items()}}
    )
    meter.start()
    out = await load()
    used = meter.stop()
    out["reply_subscription_on"] = target.reply_nodes()
    out["partition_masters"] = {str(p): target.master_of(p) for p in range(target.partitions)}
    bus_after = redis_cost.bus_bytes_sent(buses) if on_cluster else None
    costs = redis_cost.node_costs(before, redis_cost.sample(ports, on_cluster))
    n = out["decisions"]
    out["bus_bytes_per_decision"] = (
        (bus_after - bus_before) / max(n, 1) if bus_before is not None and bus_after is not None else 0.0
    )
    out["cpu_s"] = used
    out["redis"] = redis_cost.per_decision(redis_cost.masters(costs), n)
    out["redis_all_nodes"] = redis_cost.per_decision(costs.values(), n)
    out["per_node"] = [
        {
            "port": port,
            "role": cost.role,
            "partitions": holds.get(port, []),
            "cpu_us_per_decision": cost.cpu_s / max(n, 1) * 1e6,
            "publish_received_per_decision": cost.publish_bus_received / max(n, 1),
            "publishshard_received_per_decision": cost.publishshard_bus_received / max(n, 1),
            "commands_per_decision": cost.commands / max(n, 1),
        }
        for port, cost in sorted(costs.items())
    ]
    out["per_master"] = []
    for port, cost in sorted(costs.items()):
        if cost.role == "master":
            parts = holds.get(port, [])
            row = redis_cost.per_decision([cost], sum(int(out["per_partition"].get(str(p), 0)) for p in parts))
            row.pop("by_command")
            out["per_master"].append({"port": port, "partitions": parts, **row})
    return out


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Several measured rounds of one platform as one: sums, then per-decision figures."""
    n = sum(r["decisions"] for r in rounds)
    wall_s = sum(r.get("wall_s", r["decisions"] / r.get("rate_per_s", 1)) for r in rounds)
    cpu = collections.Counter[str]()
    for r in rounds:
        cpu.update(r["cpu_s"])
    dispatchers = [name for name in cpu if name.startswith("dispatcher")]
    redis_nodes = [name for name in cpu if name.startswith("redis:")]
    out: dict[str, Any] = {
        "decisions": n,
        "decisions_per_s": n / wall_s,
        "rounds": rounds,
        "p50_ms": sorted(r["p50_ms"] for r in rounds)[len(rounds) // 2],
        "p99_ms": max(r["p99_ms"] for r in rounds),
        "fail_open": sum(r["fail_open"] for r in rounds),
        "cpu_us": {
            "gateway": cpu["gateway"] / n * 1e6,
            "dispatcher": sum(cpu[d] for d in dispatchers) / n * 1e6,
            "redis_processes": sum(cpu[r] for r in redis_nodes) / n * 1e6,
            "load_generator": cpu["load generator"] / n * 1e6,
        },
    }
    for key in ("redis", "redis_all_nodes"):
        fields = [f for f in rounds[0][key] if f not in ("decisions", "by_command")]
        out[key] = {f: sum(r[key][f] * r[key]["decisions"] for r in rounds) / n for f in fields}
        commands = collections.Counter[str]()
        for r in rounds:
            commands.update({c: v * r[key]["decisions"] for c, v in r[key]["by_command"].items()})
        out[key]["by_command"] = {c: v / n for c, v in commands.most_common()}
    out["per_master"] = rounds[-1]["per_master"]
    out["bus_bytes_per_decision"] = sum(r["bus_bytes_per_decision"] * r["decisions"] for r in rounds) / n
    out["reply_subscription_on"] = rounds[-1]["reply_subscription_on"]
    out["partition_masters"] = rounds[-1]["partition_masters"]
    if "partition_p50_ms" in rounds[0]:
        out["partition_p50_ms"] = {
            p: sorted(r["partition_p50_ms"][p] for r in rounds)[len(rounds) // 2] for p in rounds[0]["partition_p50_ms"]
        }
    nodes: dict[int, dict[str, Any]] = {}
    summed = (
        "cpu_us_per_decision",
        "publish_received_per_decision",
        "publishshard_received_per_decision",
        "commands_per_decision",
    )
    for r in rounds:
        for node in r["per_node"]:
            row = nodes.setdefault(node["port"], {**node, **dict.fromkeys(summed, 0.0)})
            for field in summed:
                row[field] += node[field] * r["decisions"] / n
    out["per_node"] = list(nodes.values())
    return out


async def failover(target: Platform, args: argparse.Namespace, full_coverage: bool) -> dict[str, Any]:
    """Steady load on ``target`` while the master of partition 0 is killed; restarted afterwards."""
    cluster = target.cluster
    assert cluster is not None
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as client:
            client.config_set("cluster-require-full-coverage", "yes" if full_coverage else "no")
    victim = target.master_of(0)
    on_victim = [part for part in range(target.partitions) if target.master_of(part) == victim]
    bodies = [(str(part), body) for part, body in make_bodies(target.keys, int(args.failover_rate * args.failover_s))]
    load = asyncio.create_task(open_loop(target.port, bodies, args.failover_rate, 256, 30))
    started = time.perf_counter() + 0.05  # open_loop's first scheduled send
    await asyncio.sleep(args.kill_at_s)
    killed_at = time.perf_counter() - started
    promoted = await asyncio.to_thread(cluster.kill_master, victim)
    promoted_s = time.perf_counter() - started - killed_at
    results = await load
    restart_started = time.perf_counter()
    await asyncio.to_thread(cluster.restart, victim, 60.0)
    out = analyse_failover(results, killed_at, args.failover_s, on_victim)
    return {
        "cluster_require_full_coverage": full_coverage,
        "victim_port": victim,
        "victim_partitions": on_victim,
        "promoted_port": promoted,
        "promoted_reported_s": promoted_s,
        "restart_s": time.perf_counter() - restart_started,
        **out,
    }


@contextlib.contextmanager
def platforms(args: argparse.Namespace, logs: Path) -> Iterator[dict[str, Platform]]:
    """The single Redis, the queue Redis, the cluster and the four platforms; all stopped on exit."""
    with contextlib.ExitStack() as stack:
        single = stack.enter_context(PlainRedis(logs / "single"))
        queue = stack.enter_context(PlainRedis(logs / "queue"))
        cluster = stack.enter_context(LocalCluster(tempfile.mkdtemp(prefix="cluster-", dir=logs)))
        running: dict[str, Platform] = {}
        stack.callback(lambda: stop_all([p for plat in running.values() for p in plat.processes]))
        running["single"] = start_platform("single", "hbs:", 1, args, logs, single=single)
        for partitions in (1, 2, 4):
            running[f"cluster {partitions}p"] = start_platform(
                f"cluster {partitions}p",
                f"hb{partitions}:",
                partitions,
                args,
                logs,
                cluster=cluster,
                queue_url=queue.url,
            )
        yield running


async def main(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    version = subprocess.run(  # noqa: ASYNC221 (before any load)
        [find_cluster_binaries()[0], "--version"],
        capture_output=True,
        text=True,
    ).stdout
    results: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}, redis-server {version.split()[2][2:]}",
        "load_average": {"start": os.getloadavg()},
        "closed": {},
        "open": {},
        "failover": [],
    }
    with platforms(args, logs) as running:
        cluster = running["cluster 1p"].cluster
        assert cluster is not None
        masters = [node.port for node in cluster.masters()]
        channel = next(
            name
            for name in (f"bench:{{c{k}}}:latency" for k in range(100_000))
            if cluster.slot_owner(key_slot(name.encode())) == masters[0]
        )
        results["publish_latency"] = {
            "SPUBLISH, subscriber on the slot's master (hookbus's replies)": await publish_latency(
                masters[0], masters[0], channel, sharded=True
            ),
            "classic PUBLISH, subscriber on another master (across the cluster bus)": await publish_latency(
                masters[0], masters[1], channel, sharded=False
            ),
        }
        closed_names, open_names = ["single", "cluster 1p", "cluster 4p"], list(running)
        for name in open_names:
            await closed_loop(running[name].port, running[name].keys, 16, args.warmup_s)
        closed: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        opened: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for turn in range(args.rounds):
            for name in closed_names:
                target = running[name]
                print(f"round {turn + 1}: {name} closed loop", file=sys.stderr)
                closed[name].append(
                    await measured(
                        target,
                        lambda t=target: closed_loop(  # type: ignore[misc]
                            t.port, t.keys, args.agents, args.closed_s / args.rounds
                        ),
                    )
                )
            for name in open_names:
                target = running[name]
                rate = args.rate_per_partition * target.partitions
                print(f"round {turn + 1}: {name} open loop {rate:g}/s", file=sys.stderr)
                opened[name].append(
                    await measured(
                        target,
                        lambda t=target, r=rate: steady(  # type: ignore[misc]
                            t.port, t.keys, r, args.open_s / args.rounds
                        ),
                    )
                )
        results["closed"] = {name: combine(rounds) for name, rounds in closed.items()}
        results["open"] = {name: combine(rounds) for name, rounds in opened.items()}
        for name, target in running.items():
            results.setdefault("log_record", {})[name] = {
                str(p): redis_cost.record_bytes(target.master_of(p), [target.keys.decision_log(p)])
                for p in range(target.partitions)
            }
            results.setdefault("outcome_key", {})[name] = redis_cost.key_bytes(
                target.master_of(0), target.keys.outcome("*", 0)
            )
        bodies = make_bodies(running["single"].keys, 600)
        results["input_bytes"] = sum(len(body) for _, body in bodies) / len(bodies)
        if not args.skip_failover:
            four = running["cluster 4p"]
            stop_all([p for name, plat in running.items() if plat is not four for p in plat.processes])
            for full_coverage in (True, False):
                print(f"failover, cluster-require-full-coverage {'yes' if full_coverage else 'no'}", file=sys.stderr)
                results["failover"].append(await failover(four, args, full_coverage))
    results["load_average"]["end"] = os.getloadavg()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=32, help="concurrent agents in the closed loop (default 32)")
    parser.add_argument("--closed-s", type=float, default=15, help="closed-loop seconds per platform (default 15)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--warmup-s", type=float, default=2, help="warm-up seconds per platform (default 2)")
    parser.add_argument(
        "--rate-per-partition", type=float, default=150, help="open-loop decisions/s per partition (default 150)"
    )
    parser.add_argument("--open-s", type=float, default=10, help="open-loop seconds per platform (default 10)")
    parser.add_argument("--dispatchers", type=int, default=2, help="dispatchers per platform (default 2)")
    parser.add_argument("--deadline-s", type=float, default=1.0, help="PreToolUse deadline (default 1)")
    parser.add_argument("--failover-rate", type=float, default=200, help="decisions/s during failover (default 200)")
    parser.add_argument("--failover-s", type=float, default=20, help="failover phase seconds (default 20)")
    parser.add_argument("--kill-at-s", type=float, default=5, help="when the master is killed (default 5)")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--logs", type=Path, help="keep the roles' logs and the Redis folders here")
    parsed = parser.parse_args()
    folder = parsed.logs or Path(tempfile.mkdtemp(prefix="hookbus-cluster-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        out = uvloop.run(main(parsed, folder))
    finally:
        if parsed.logs is None:
            shutil.rmtree(folder, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(out, indent=2))
    print(markdown(out))
