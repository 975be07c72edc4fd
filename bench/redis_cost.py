"""What a benchmark phase cost Redis: ``INFO`` deltas of every node, per decision.

:func:`sample` reads each node's ``INFO commandstats``, ``stats``, ``cpu``, ``memory``,
``server`` and ``replication`` (and ``CLUSTER INFO`` on a cluster node) over a plain
connection to that node; :func:`node_costs` turns two samples into per-node deltas and
:func:`per_decision` divides them by the decisions the node's partitions made.

Counted by Redis itself, so nothing here depends on what else loads the machine, except the
CPU seconds. Commands that a Lua script runs (the settle script's ``TIME``, ``GET``,
``XADD``, ``SET``, ``XACK``, ``PUBLISH`` or ``SPUBLISH``) are counted in ``commandstats`` and in
``total_commands_processed`` like a client's; ``evalsha`` says how many scripts ran. Network
bytes are the node's client traffic: Redis 7's ``total_net_*`` include the replication
traffic, which ``total_net_repl_*`` count alone, so that is subtracted. The cluster bus is not
in them: ``publish_bus`` counts the publish messages it carried (a classic ``PUBLISH`` goes to
every node) and ``publishshard_bus`` the sharded ones (an ``SPUBLISH`` goes to the other nodes
of its shard, its replicas).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

import redis

#: ``INFO stats`` counters kept (all monotonic).
STAT_FIELDS = (
    "total_commands_processed",
    "total_net_input_bytes",
    "total_net_output_bytes",
    "total_net_repl_input_bytes",
    "total_net_repl_output_bytes",
)


@dataclasses.dataclass(frozen=True)
class NodeSample:
    """One node's counters at one instant."""

    port: int
    role: str  # "master" or "slave", as INFO replication says
    pid: int
    calls: dict[str, int]  # command -> calls so far
    stats: dict[str, int]
    cpu_s: float  # used_cpu_user + used_cpu_sys
    used_memory: int
    publish_bus: int  # cluster-bus publish messages sent (0 outside a cluster)
    publish_bus_received: int
    publishshard_bus: int  # cluster-bus sharded publish messages sent
    publishshard_bus_received: int


@dataclasses.dataclass(frozen=True)
class NodeCost:
    """What one node did between two samples."""

    port: int
    role: str
    calls: dict[str, int]
    stats: dict[str, int]
    cpu_s: float
    used_memory_delta: int
    publish_bus: int
    publish_bus_received: int
    publishshard_bus: int
    publishshard_bus_received: int

    @property
    def commands(self) -> int:
        return sum(self.calls.values())


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5.0, socket_connect_timeout=2.0)


def sample_node(port: int, cluster: bool) -> NodeSample:
    """The counters of the node on ``port``."""
    with _client(port) as client:
        commandstats: dict[str, Any] = client.info("commandstats")
        info: dict[str, Any] = client.info("everything")
        publish_bus = publish_bus_received = publishshard_bus = publishshard_bus_received = 0
        if cluster:
            text = client.execute_command("CLUSTER", "INFO")
            text = text.decode() if isinstance(text, bytes) else str(text)
            fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
            publish_bus = int(fields.get("cluster_stats_messages_publish_sent", 0))
            publish_bus_received = int(fields.get("cluster_stats_messages_publish_received", 0))
            publishshard_bus = int(fields.get("cluster_stats_messages_publishshard_sent", 0))
            publishshard_bus_received = int(fields.get("cluster_stats_messages_publishshard_received", 0))
    calls = {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in commandstats.items()
        if name.startswith("cmdstat_")
    }
    return NodeSample(
        port=port,
        role=str(info["role"]),
        pid=int(info["process_id"]),
        calls=calls,
        stats={name: int(info.get(name, 0)) for name in STAT_FIELDS},
        cpu_s=float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
        used_memory=int(info["used_memory"]),
        publish_bus=publish_bus,
        publish_bus_received=publish_bus_received,
        publishshard_bus=publishshard_bus,
        publishshard_bus_received=publishshard_bus_received,
    )


def sample(ports: Iterable[int], cluster: bool) -> dict[int, NodeSample]:
    """:func:`sample_node` of every port."""
    return {port: sample_node(port, cluster) for port in ports}


def node_costs(before: Mapping[int, NodeSample], after: Mapping[int, NodeSample]) -> dict[int, NodeCost]:
    """Per-node deltas of two :func:`sample` results (nodes in both only).

    The ``info`` and ``cluster|info`` calls of the samples themselves are left out.
    """
    costs = {}
    for port, end in after.items():
        start = before.get(port)
        if start is None or start.pid != end.pid:
            continue
        calls = {
            name: count - start.calls.get(name, 0)
            for name, count in end.calls.items()
            if name not in ("info", "cluster|info") and count - start.calls.get(name, 0) > 0
        }
        costs[port] = NodeCost(
            port=port,
            role=end.role,
            calls=calls,
            stats={name: end.stats[name] - start.stats[name] for name in STAT_FIELDS},
            cpu_s=end.cpu_s - start.cpu_s,
            used_memory_delta=end.used_memory - start.used_memory,
            publish_bus=end.publish_bus - start.publish_bus,
            publish_bus_received=end.publish_bus_received - start.publish_bus_received,
            publishshard_bus=end.publishshard_bus - start.publishshard_bus,
            publishshard_bus_received=end.publishshard_bus_received - start.publishshard_bus_received,
        )
    return costs


def per_decision(costs: Iterable[NodeCost], decisions: int) -> dict[str, Any]:
    """The summed costs of ``costs`` divided by ``decisions``."""
    chosen = list(costs)
    n = max(decisions, 1)
    calls: dict[str, int] = {}
    for cost in chosen:
        for name, count in cost.calls.items():
            calls[name] = calls.get(name, 0) + count
    return {
        "decisions": decisions,
        "commands": sum(c.commands for c in chosen) / n,
        "evalsha": calls.get("evalsha", 0) / n,
        "net_in_bytes": sum(c.stats["total_net_input_bytes"] - c.stats["total_net_repl_input_bytes"] for c in chosen)
        / n,
        "net_out_bytes": sum(c.stats["total_net_output_bytes"] - c.stats["total_net_repl_output_bytes"] for c in chosen)
        / n,
        "repl_out_bytes": sum(c.stats["total_net_repl_output_bytes"] for c in chosen) / n,
        "cpu_us": sum(c.cpu_s for c in chosen) / n * 1e6,
        "publish_bus": sum(c.publish_bus for c in chosen) / n,
        "publishshard_bus": sum(c.publishshard_bus for c in chosen) / n,
        "by_command": {name: count / n for name, count in sorted(calls.items(), key=lambda kv: -kv[1])},
    }


def masters(costs: Mapping[int, NodeCost]) -> list[NodeCost]:
    return [cost for cost in costs.values() if cost.role == "master"]


def record_bytes(port: int, keys: Iterable[str]) -> dict[str, float]:
    """Bytes per entry of the streams ``keys`` held by the node on ``port`` (MEMORY USAGE, every
    node of the stream counted, over XLEN)."""
    used, entries = 0, 0
    with _client(port) as client:
        for key in keys:
            length = int(client.xlen(key))
            if length:
                used += int(client.memory_usage(key, samples=0) or 0)
                entries += length
    return {"entries": entries, "bytes_per_entry": used / entries if entries else 0.0}


def bus_ports(port: int) -> set[int]:
    """The cluster-bus ports of every node, as the node on ``port`` lists them (``ip:port@busport``)."""
    with _client(port) as client:
        text = client.execute_command("CLUSTER", "NODES")
    text = text.decode() if isinstance(text, bytes) else str(text)
    return {int(line.split()[1].partition("@")[2].partition(",")[0]) for line in text.strip().splitlines()}


def bus_bytes_sent(ports: set[int]) -> int | None:
    """Bytes sent so far on every open cluster-bus connection (``ss -ti``: Linux, iproute2), or None
    without ``ss``. Connections that closed between two readings are missed."""
    if shutil.which("ss") is None:
        return None
    lines = subprocess.run(
        ["ss", "-tinH", "state", "established"], capture_output=True, text=True, timeout=10
    ).stdout.splitlines()
    total = 0
    for head, info in itertools.pairwise(lines):
        found = re.match(r"\s*\d+\s+\d+\s+\S+:(\d+)\s+\S+:(\d+)", head)
        if found and (int(found.group(1)) in ports or int(found.group(2)) in ports):
            sent = re.search(r"bytes_sent:(\d+)", info)
            total += int(sent.group(1)) if sent else 0
    return total


def key_bytes(port: int, pattern: str, count: int = 200) -> dict[str, float]:
    """Mean MEMORY USAGE of up to ``count`` keys matching ``pattern`` on the node on ``port``."""
    with _client(port) as client:
        found = []
        for key in client.scan_iter(match=pattern, count=1000):
            found.append(key)
            if len(found) >= count:
                break
        sizes = [int(client.memory_usage(key) or 0) for key in found]
    return {"keys": len(sizes), "bytes_per_key": sum(sizes) / len(sizes) if sizes else 0.0}


__all__ = [
    "NodeCost",
    "NodeSample",
    "bus_bytes_sent",
    "bus_ports",
    "key_bytes",
    "masters",
    "node_costs",
    "per_decision",
    "record_bytes",
    "sample",
    "sample_node",
]
