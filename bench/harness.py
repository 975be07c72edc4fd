"""What the benchmarks share: the Bash calls they send, the roles they start, the load
generator, what a process costs (read from /proc) and py-spy profiles.

``BODIES`` are 8,192 PreToolUse Bash calls, each a different command (four allowed, two denied
by ``examples/policy.yaml``). The load generator speaks just enough HTTP/1.1 on a raw asyncio
protocol to drive ``POST /v1/hooks``: httpx costs more CPU per request than the gateway it would
measure, and the load generator shares the cores. A role's throughput depends on what else runs
on the host, its CPU per request does not, so the benchmarks report both. ``python
bench/harness.py FILE`` summarises a py-spy recording (``spy_record``: collapsed stacks).
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
# Every gateway and dispatcher a benchmark starts inherits this environment: one reply key for all.
os.environ.setdefault("HOOKBUS_REPLY_KEY", secrets.token_hex(32))
POLICY = ROOT / "examples" / "policy.yaml"
# Every request carries a different command (no cache helps): four allowed, two denied.
COMMANDS = [
    "ls -la src/mod{i}",
    "git status --short -- pkg{i}",
    "npm run test -- --shard={i}",
    "rm -rf /home/u{i}",
    "cat docs/page{i}.md",
    "git push --force origin feature-{i}",
]


def hook_input(command: str, i: int, session: str | None = None) -> bytes:
    """A PreToolUse Bash call of ``command`` (tool use ``i``; session ``bench-{i % 50}`` unless given)."""
    return orjson.dumps(
        {
            "session_id": session or f"bench-{i % 50}",
            "transcript_path": "/home/dev/.claude/projects/bench/session.jsonl",
            "cwd": "/home/dev/project",
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command, "description": "bench"},
            "tool_use_id": f"toolu_{i:08d}",
        }
    )


BODIES = [hook_input(COMMANDS[i % len(COMMANDS)].format(i=i), i) for i in range(8192)]


# -- the roles ------------------------------------------------------------------------------


def start_roles(url: str, port: int, dispatchers: int, policy: Path = POLICY) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "HOOKBUS_REDIS_URL": url, "HOOKBUS_LOG_LEVEL": "warning"}
    hookbus = [sys.executable, "-m", "hookbus"]
    roles = [subprocess.Popen([*hookbus, "gateway", "--config", str(policy), "--port", str(port)], env=env, cwd=ROOT)]
    roles += [
        subprocess.Popen([*hookbus, "dispatcher", "--config", str(policy)], env=env, cwd=ROOT)
        for _ in range(dispatchers)
    ]
    return wait_ready(roles, port, dispatchers)


def stop_roles(roles: Iterable[subprocess.Popen[bytes]], timeout_s: float = 10) -> None:
    """Terminate every role first, then wait for each (they stop in parallel)."""
    started = list(roles)
    for role in started:
        role.terminate()
    for role in started:
        role.wait(timeout_s)


def wait_ready(roles: list[subprocess.Popen[bytes]], port: int, dispatchers: int) -> list[subprocess.Popen[bytes]]:
    """``roles`` once the gateway on ``port`` is ready and sees ``dispatchers`` alive (30 s at most)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).json()
            if ready["ready"] and ready["checks"]["dispatchers"]["alive"] >= dispatchers:
                return roles
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.1)
    for role in roles:  # the caller never sees them: do not leave them running
        role.kill()
        role.wait(5)
    raise RuntimeError("hookbus did not become ready")


def hook_caller(port: int, bodies: list[bytes] = BODIES) -> Callable[[], Awaitable[Callable[[int], Awaitable[None]]]]:
    """For :func:`saturate` and :func:`steady_rate`: each call opens a connection whose calls post
    ``bodies`` in turn (a non-200 answer raises)."""

    async def make_call() -> Callable[[int], Awaitable[None]]:
        connection = await Connection("127.0.0.1", port).open()

        async def call(i: int) -> None:
            status, body = await connection.post("/v1/hooks", bodies[i % len(bodies)])
            if status != 200:
                raise RuntimeError(f"gateway answered {status}: {body[:200]!r}")

        return call

    return make_call


# -- the load generator ---------------------------------------------------------------------


class _Http1(asyncio.Protocol):
    """The client side of one keep-alive connection: one request at a time, the answer parsed
    as it arrives (no stream reader, no task: a future per request)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.head = b""
        self.length = 0
        self.waiter: asyncio.Future[tuple[bytes, bytes]] | None = None
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.head:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head = bytes(self.buffer[: end + 4])
            del self.buffer[: end + 4]
            at = self.head.lower().find(b"\r\ncontent-length:")
            self.length = int(self.head[at + 17 : self.head.index(b"\r\n", at + 2)]) if at >= 0 else 0
        if len(self.buffer) < self.length:
            return
        body = bytes(self.buffer[: self.length])
        del self.buffer[: self.length]
        head, self.head = self.head, b""
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((head, body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionResetError("the server closed the connection")
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(asyncio.IncompleteReadError(bytes(self.buffer), None))


class Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._protocol: _Http1 | None = None

    async def open(self) -> Connection:
        _, self._protocol = await asyncio.get_running_loop().create_connection(_Http1, self.host, self.port)
        return self

    async def post(self, path: str, body: bytes, headers: bytes = b"") -> tuple[int, bytes]:
        status, _, payload = await self.post_head(path, body, headers)
        return status, payload

    async def post_head(self, path: str, body: bytes, headers: bytes = b"") -> tuple[int, bytes, bytes]:
        """``(status, response head, body)``."""
        protocol = self._protocol
        assert protocol is not None and protocol.transport is not None
        if protocol.lost is not None:
            raise protocol.lost
        protocol.waiter = waiter = asyncio.get_running_loop().create_future()
        protocol.transport.write(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\nHost: "
            + self.host.encode()
            + b"\r\nContent-Type: application/json\r\n"
            + headers
            + b"Content-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        head, payload = await waiter
        return int(head[9:12]), head, payload

    async def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(latencies_s: list[float]) -> dict[str, float]:
    return {
        "n": len(latencies_s),
        "p50_ms": percentile(latencies_s, 0.50) * 1000,
        "p99_ms": percentile(latencies_s, 0.99) * 1000,
        "max_ms": max(latencies_s) * 1000,
        "mean_ms": statistics.fmean(latencies_s) * 1000,
    }


Call = Callable[[int], Awaitable[object]]


async def steady_rate(
    make_call: Callable[[], Awaitable[Call]], rate_per_s: float, duration_s: float, connections: int = 32
) -> list[float]:
    """Open loop: start one request every 1/rate seconds.

    Latency runs from the moment the request is written. The event loop's timers have a
    resolution of about a millisecond, so counting from the *scheduled* time would charge the
    load generator's own wake-up lateness to the server; :data:`LAG` records that lateness so
    a report can show the generator kept to its schedule.
    """
    calls = [await make_call() for _ in range(connections)]
    free: asyncio.Queue[Call] = asyncio.Queue()
    for call in calls:
        free.put_nowait(call)
    latencies: list[float] = []
    LAG.clear()
    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    total = int(rate_per_s * duration_s)

    async def one(i: int, scheduled: float) -> None:
        call = await free.get()
        try:
            sent = time.perf_counter()
            LAG.append(sent - scheduled)
            await call(i)
        finally:
            free.put_nowait(call)
        latencies.append(time.perf_counter() - sent)

    for i in range(total):
        scheduled = start + i / rate_per_s
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    return latencies


#: How late each request of the last :func:`steady_rate` run left, in seconds.
LAG: list[float] = []


async def saturate(
    make_call: Callable[[], Awaitable[Call]], concurrency: int, duration_s: float
) -> tuple[int, float, list[float]]:
    """Closed loop: ``concurrency`` workers back to back; returns (completed, seconds, latencies)."""
    calls = [await make_call() for _ in range(concurrency)]
    done = 0
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration_s

    async def worker(call: Call, offset: int) -> None:
        nonlocal done
        i = offset
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - t0)
            done += 1
            i += concurrency

    started = time.perf_counter()
    await asyncio.gather(*(worker(call, n) for n, call in enumerate(calls)))
    return done, time.perf_counter() - started, latencies


# -- what a process costs -------------------------------------------------------------------

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds used by ``pid`` so far (0.0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def switches(pid: int) -> tuple[int, int]:
    """Context switches of all of ``pid``'s threads so far: (voluntary, involuntary).

    A voluntary switch is a wait (for a socket, a lock, the next event), so each is a later
    wake-up; an involuntary one is a preemption by another process wanting the core.
    """
    voluntary = involuntary = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches:"):
                        voluntary += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        involuntary += int(line.split()[1])
        except OSError:  # the thread ended meanwhile
            continue
    return voluntary, involuntary


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid`` (0 once it has gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def usage(pids: dict[str, int]) -> dict[str, int]:
    """``<name>_rss`` (bytes) and ``<name>_fds`` of each named process, now."""
    sample: dict[str, int] = {}
    for name, pid in pids.items():
        sample[f"{name}_rss"] = rss_bytes(pid)
        sample[f"{name}_fds"] = fd_count(pid)
    return sample


class CpuMeter:
    """CPU seconds (and context switches) of a set of named processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, float] = {}
        self._start_switches: dict[str, tuple[int, int]] = {}
        self.used_s: dict[str, float] = {}
        #: (voluntary, involuntary) context switches of each process over the measurement.
        self.switches: dict[str, tuple[int, int]] = {}

    def start(self) -> None:
        self._start = {name: cpu_s(pid) for name, pid in self.pids.items()}
        self._start_switches = {name: switches(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.used_s = {name: cpu_s(pid) - self._start.get(name, 0.0) for name, pid in self.pids.items()}
        for name, pid in self.pids.items():
            (v0, i0), (v1, i1) = self._start_switches.get(name, (0, 0)), switches(pid)
            self.switches[name] = (v1 - v0, i1 - i0)
        return self.used_s

    def per_request_switches(self, requests: int) -> dict[str, tuple[float, float]]:
        """(voluntary, involuntary) context switches per request of each process (after :meth:`stop`)."""
        return {name: (v / max(requests, 1), i / max(requests, 1)) for name, (v, i) in self.switches.items()}

    def per_request_us(self, requests: int, names: Iterable[str] | None = None) -> dict[str, float]:
        """CPU µs per request of each process (after :meth:`stop`)."""
        chosen = list(names) if names is not None else list(self.used_s)
        return {name: self.used_s[name] / max(requests, 1) * 1e6 for name in chosen}


# -- py-spy ---------------------------------------------------------------------------------

_LOCATION = re.compile(r" \((?P<file>[^()]*?):(?P<line>\d+)\)$")


def spy_record(pid: int, seconds: float, out: Path, rate_hz: int = 200) -> subprocess.Popen[bytes] | None:
    """Start py-spy on ``pid`` for ``seconds`` (collapsed stacks into ``out``); None without py-spy."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return None
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            str(rate_hz),
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _short(frame: str) -> str:
    """``function (file.py:line)`` with the file's path cut to package/module."""
    match = _LOCATION.search(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", f"{ROOT}/", "python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{frame[: match.start()]} ({path})"


def spy_top(path: Path, n: int = 15) -> dict[str, list[tuple[str, float]]]:
    """The ``n`` functions with most samples, by self and inclusive share (0..1) of all samples."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [
            _short(f) for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")
        ]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    total = total or 1
    return {
        "self": [(f, c / total) for f, c in own.most_common(n)],
        "inclusive": [(f, c / total) for f, c in inclusive.most_common(n)],
        "samples": [("", float(total))],
    }


def spy_report(path: Path, title: str, n: int = 15) -> str:
    """A markdown summary of one recording."""
    summary = spy_top(path, n)
    lines = [f"#### {title} ({int(summary['samples'][0][1])} samples)", "", "| self | function |", "|---|---|"]
    lines += [f"| {share:.1%} | `{frame}` |" for frame, share in summary["self"]]
    lines += ["", "| inclusive | function |", "|---|---|"]
    lines += [f"| {share:.1%} | `{frame}` |" for frame, share in summary["inclusive"]]
    return "\n".join(lines)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(spy_report(Path(name), Path(name).name))
        print()
