"""The chaos harness: a platform of real processes on a Redis of its own, a steady load, the checks.

Each test starts an :class:`~hookbus.platform.redis_server.EmbeddedRedis` on a loopback TCP port with
the append-only file on, a ``hookbus gateway``, dispatcher(s) and a ``hookbus worker`` as
``python -m hookbus <role>`` subprocesses (``HOOKBUS_REDIS_URL``), drives a steady load over
real HTTP on 127.0.0.1 (:class:`Load`) while one fault happens, and then checks what every
agent was told against the decision log, and what the async hooks did (:func:`verify`).

Nothing waits by sleeping: the load is paced at a fixed rate, a fault is held for a number
of requests of that load, and every wait for a condition polls it under a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest_asyncio
import redis.exceptions
import yaml

from bus.stream.protocol import LogRecord
from hookbus.platform.redis_server import EmbeddedRedis, free_port
from tests.conftest import REPO, BusProbe, clean_env, pre_tool_use

#: The blocking deadline: 0.95 s, so that the gateway's 1.0 s latency bucket is exactly
#: "deadline + 50 ms" for the server-side bound.
DEADLINE_S = 0.95
SERVER_BUCKET = "1.0"
#: The client-side bound is deadline + 1 s. The strict bound (deadline + 50 ms, end to end
#: at the gateway) is read from the gateway's latency histogram; the client's clock adds what
#: the gateway cannot see: the kernel's loopback, uvicorn's HTTP parsing before the handler
#: starts, and above all this test's own event loop, which paces the load, runs up to ~80
#: concurrent httpx requests and polls Redis, on a 2-core box shared with Redis, a gateway,
#: one or two dispatchers, a worker and the hooks' shells. Measured on such a box over ~15
#: runs of these faults: usually 10-60 ms over the deadline, at worst 185 ms (with another
#: test suite running at the same time), while the gateway's histogram kept every answer
#: within deadline + 50 ms; on a fresh clone with another suite running, 313 ms over once, the
#: histogram again clean. 1 s leaves room for that and still catches an answer held back by a
#: second wait for the deadline. On a slower host the test's loop once stalled for longer
#: (2,042 ms for an answer the gateway's histogram had within the deadline), so the time this
#: process's own loop was measured stalled during an answer is not counted against it; nor is
#: the time before the gateway received the request (the decision log's received time): on a
#: still slower host this process's client sent requests up to 4.7 s after they were due,
#: after a fault, while the gateway answered each within 360 ms of receiving it.
CLIENT_MARGIN_S = 1.0
#: The load's loop is checked every TICK_S; running STALL_S later than that counts as a stall.
TICK_S = 0.02
STALL_S = 0.05
#: Requests per second of the load: two PreToolUse (deny, allow, slow, allow) for every Notification.
RATE = 80.0
#: Dispatchers claim entries idle this long (the default, 5 s, would only make the tests slower).
CLAIM_IDLE_MS = 1000
#: arq's key prefixes (arq.constants), the same for every queue name.
ARQ_RESULT = "arq:result:"
ARQ_IN_PROGRESS = "arq:in-progress:"


#: What a ``make`` command's hook answers, after 0.3 s.
SLOW_ALLOW = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": "chaos: slow but fine",
    }
}


def chaos_policy(ran_file: Path) -> str:
    """PreToolUse: ``rm -rf`` denied and ``ls`` allowed by a rule; ``make`` allowed by a command
    hook that takes 0.3 s (so that decisions are in flight whenever a fault strikes).
    Notification: an async command hook that appends the event id to ``ran_file`` (after
    0.2 s, so that jobs are running at any moment). arq's results are kept (by default none
    are) for the checks to inspect: which jobs finished, and which were given up."""
    append = f"cat >/dev/null; sleep 0.2; printf '%s\\n' \"$HOOKBUS_EVENT_ID\" >> {shlex.quote(str(ran_file))}"
    slow = f"cat >/dev/null; sleep 0.3; echo {shlex.quote(orjson.dumps(SLOW_ALLOW).decode())}"
    return yaml.safe_dump(
        {
            "hookbus": {"deadlineSeconds": DEADLINE_S, "async": {"keepResultSeconds": 600}},
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "Bash",
                        "hooks": [
                            {
                                "type": "rule",
                                "deny": ["Bash(rm -rf *)"],
                                "allow": ["Bash(ls *)"],
                                "reason": "chaos: no rm -rf",
                            },
                            {"type": "command", "if": "Bash(make *)", "timeout": 5, "command": slow},
                        ],
                    }
                ],
                "Notification": [{"hooks": [{"type": "command", "async": True, "timeout": 10, "command": append}]}],
            },
        }
    )


async def poll(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.05) -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy; returns its last
    value (falsy on timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval_s)


# -- the processes --------------------------------------------------------------------------------


@dataclasses.dataclass
class Role:
    """One ``hookbus <role>`` process, its output in a log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int | None = None
    #: Replaced by the test (killed on purpose): not expected to run at the end.
    retired: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def log_excerpt(self, lines: int = 15) -> str:
        """The warnings, errors and tracebacks of the log (the last ``lines``), and how it ended."""
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        notable = [line for line in text if re.search(r"WARNING|ERROR|CRITICAL|Traceback|Error|^\s", line)]
        state = "running" if self.alive() else f"exited {self.process.returncode}"
        return "\n".join([f"--- {self.name} (pid {self.pid}, {state}): {self.log}", *notable[-lines:]])


def consumer(dispatcher: Role) -> str:
    """A dispatcher process's consumer name in the group (and heartbeat field)."""
    return f"{socket.gethostname()}-{dispatcher.pid}"


class Cluster:
    """A private Redis and the hookbus roles on it, started and stopped by one test."""

    def __init__(self, tmp: Path, *, appendonly: bool = True) -> None:
        self.dir = tmp
        self.redis = EmbeddedRedis(tmp / "redis", persistent=appendonly, port=free_port())
        # Redis is started (and stopped) from this one thread, off the event loop: the child
        # gets SIGTERM when the thread that spawned it ends (PR_SET_PDEATHSIG), so the thread
        # lives as long as the cluster.
        self._redis_thread = ThreadPoolExecutor(1, thread_name_prefix="chaos-redis")
        self.ran_file = tmp / "async-ran.txt"
        self.policy = tmp / "policy.yaml"
        self.policy.write_text(chaos_policy(self.ran_file))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.roles: list[Role] = []
        self._numbers = itertools.count(1)
        self.probe: BusProbe | None = None
        self.http = httpx.AsyncClient(
            timeout=10, limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200)
        )

    # -- Redis --

    async def _in_redis_thread(self, fn: Callable[[], Any]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._redis_thread, fn)

    async def start_redis(self) -> None:
        await self._in_redis_thread(self.redis.start)
        if self.probe is None:
            self.probe = BusProbe(self.redis.url)
        await self.redis_call(lambda r: r.config_set("appendfsync", "everysec"))

    async def stop_redis(self) -> None:
        """SIGTERM: Redis shuts down gracefully (the AOF is flushed and fsynced); waits for the exit."""
        await self._in_redis_thread(self.redis.stop)

    async def redis_call(self, call: Callable[[Any], Awaitable[Any]], timeout_s: float = 5.0) -> Any:
        """``call(redis)`` on the probe's connection, retried while the connection is being re-made."""
        assert self.probe is not None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return await call(self.probe.redis)
            except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    @property
    def bus(self) -> BusProbe:
        assert self.probe is not None
        return self.probe

    # -- roles --

    def env(self) -> dict[str, str]:
        return clean_env(
            HOOKBUS_REDIS_URL=self.redis.url, HOOKBUS_CLAIM_IDLE_MS=str(CLAIM_IDLE_MS), HOOKBUS_LOG_LEVEL="info"
        )

    def spawn(self, role: str, *args: str, metrics: bool = False) -> Role:
        name = f"{role}-{next(self._numbers)}"
        log = self.dir / f"{name}.log"
        metrics_port = free_port() if metrics else None
        extra = ["--metrics-port", str(metrics_port)] if metrics_port else []
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "hookbus", role, "--config", str(self.policy), *args, *extra],
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        started = Role(name, process, log, metrics_port)
        self.roles.append(started)
        return started

    def running(self, role: str) -> list[Role]:
        return [r for r in self.roles if r.name.startswith(f"{role}-") and not r.retired]

    @property
    def gateway(self) -> Role:
        return self.running("gateway")[0]

    async def _up(self, role: Role, ready: Callable[[], Awaitable[bool]], timeout_s: float = 20.0) -> Role:
        async def check() -> bool:
            if not role.alive():
                raise AssertionError(f"{role.name} exited while starting\n{role.log_excerpt(40)}")
            return await ready()

        if not await poll(check, timeout_s):
            raise AssertionError(f"{role.name} not ready within {timeout_s}s\n{role.log_excerpt(40)}")
        return role

    async def start_gateway(self) -> Role:
        role = self.spawn("gateway", "--port", str(self.port))

        async def ready() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return (await self.http.get(f"{self.url}/readyz")).status_code == 200
            return False

        return await self._up(role, ready)

    async def start_dispatcher(self) -> Role:
        role = self.spawn("dispatcher", metrics=True)

        async def ready() -> bool:
            return bool(await self.bus.redis.hexists(self.bus.keys.dispatchers, consumer(role)))  # type: ignore[misc]

        return await self._up(role, ready)

    async def slow_in_hand(self, role: Role) -> list[bytes]:
        """The blocking entries of slow (``make``) requests a dispatcher has read and not settled yet."""
        stream = self.bus.keys.blocking_stream()
        found: list[bytes] = []
        for entry in await self.bus.pending(stream):
            if entry["consumer"].decode() == consumer(role):
                read = await self.bus.redis.xrange(stream, entry["message_id"], entry["message_id"])
                if read and b"make -C" in read[0][1].get(b"p", b""):
                    found.append(entry["message_id"])
        return found

    async def start_worker(self) -> Role:
        # arq records its health key on its first poll: a fresh key means this worker polls.
        health = f"{self.bus.keys.arq_queue}:health-check"
        await self.bus.redis.delete(health)
        role = self.spawn("worker", metrics=True)

        async def ready() -> bool:
            return bool(await self.bus.redis.exists(health))

        return await self._up(role, ready)

    async def start(self, dispatchers: int) -> None:
        await self.start_redis()
        for _ in range(dispatchers):
            await self.start_dispatcher()
        await self.start_worker()
        await self.start_gateway()

    async def stop(self) -> None:
        for role in self.roles:
            role.send(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            role.send(signal.SIGTERM)

        await poll(lambda: not any(role.alive() for role in self.roles), 10)
        for role in self.roles:
            if role.alive():
                role.process.kill()
            role.process.wait(5)
        await self.http.aclose()
        if self.probe is not None:
            with contextlib.suppress(Exception):
                await self.probe.close()
        await self.stop_redis()
        self._redis_thread.shutdown()

    # -- what the roles say --

    async def scrape(self, role: Role) -> dict[str, float]:
        """``role``'s /metrics as ``{'name{a="b",...}': value}`` (labels sorted); {} if it cannot be read."""
        url = (
            f"{self.url}/metrics"
            if role.name.startswith("gateway")
            else f"http://127.0.0.1:{role.metrics_port}/metrics"
        )
        try:
            text = (await self.http.get(url, timeout=2)).text
        except httpx.HTTPError:
            return {}
        return parse_metrics(text)

    async def spool_held(self) -> int:
        try:
            body = (await self.http.get(f"{self.url}/readyz", timeout=2)).json()
            return int(body["checks"]["spool"]["held"])
        except (httpx.HTTPError, KeyError, ValueError):
            return -1


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, float]:
    samples: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(_LABEL.findall(match["labels"] or "")))
        samples[f"{match['name']}{{{labels}}}"] = float(match["value"])
    return samples


# -- the load -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Answer:
    """One request of the load and what came back."""

    n: int
    kind: str  # "deny" | "allow" | "slow" (PreToolUse, blocking) | "note" (Notification with an async hook)
    sent_s: float  # since the load started
    sent_ms: int = 0  # wall clock, as the gateway's received time in the decision log
    latency_s: float = 0.0
    status: int = 0  # 0: no HTTP answer at all
    body: Any = None
    outcome: str = ""
    event_id: str = ""
    error: str = ""

    @property
    def blocking(self) -> bool:
        return self.kind != "note"

    @property
    def expected(self) -> str:
        """The decision the policy gives this request."""
        return {"deny": "deny", "allow": "allow", "slow": "allow"}.get(self.kind, "none")

    @property
    def decision(self) -> str:
        """The decision the agent got: ``permissionDecision``, or "none"."""
        if not isinstance(self.body, dict):
            return "none"
        return str((self.body.get("hookSpecificOutput") or {}).get("permissionDecision") or "none")

    def __str__(self) -> str:
        return (
            f"#{self.n} {self.kind} at {self.sent_s:.2f}s: {self.status or self.error} {self.outcome} "
            f"{self.event_id} {self.latency_s * 1000:.0f}ms {orjson.dumps(self.body).decode()[:120]}"
        )


KINDS = ("deny", "allow", "note", "slow", "allow", "note")


def hook_input(n: int, kind: str) -> dict[str, Any]:
    session = f"chaos-{n % 7}"
    if kind == "deny":
        return pre_tool_use(f"rm -rf /tmp/chaos-{n}", session)
    if kind == "allow":
        return pre_tool_use(f"ls -la /tmp/chaos-{n}", session)
    if kind == "slow":
        return pre_tool_use(f"make -C /tmp/chaos-{n}", session)
    return {"hook_event_name": "Notification", "session_id": session, "message": f"chaos {n}"}


class Load:
    """A steady stream of hook requests at ``rate`` per second, each answer recorded."""

    def __init__(self, cluster: Cluster, rate: float = RATE, max_s: float = 40.0) -> None:
        self.cluster = cluster
        self.rate = rate
        self.max_s = max_s
        self.answers: list[Answer] = []
        self._requests: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._started = 0.0
        self._pacer: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        #: (start s, seconds) of each time this process's own loop ran late: see :meth:`stalled_s`.
        self.stalls: list[tuple[float, float]] = []

    def now_s(self) -> float:
        return time.perf_counter() - self._started

    @property
    def sent(self) -> int:
        return len(self.answers)

    def start(self) -> None:
        self._started = time.perf_counter()
        self._pacer = asyncio.create_task(self._pace(), name="chaos-load")
        self._watcher = asyncio.create_task(self._watch(), name="chaos-load-watch")

    async def _watch(self) -> None:
        """Note each time this process's loop ran over ``STALL_S`` late: an answer it read then was
        late on the client side only (the gateway's own histogram is checked separately)."""
        while not self._stopping:
            before = self.now_s()
            await asyncio.sleep(TICK_S)  # a clock tick to measure the loop by, not a synchronisation
            late_s = self.now_s() - before - TICK_S
            if late_s > STALL_S:
                self.stalls.append((before + TICK_S, late_s))

    def stalled_s(self, from_s: float, to_s: float) -> float:
        """Seconds this process's loop was stalled between ``from_s`` and ``to_s``."""
        return sum(
            min(to_s, at + late) - max(from_s, at) for at, late in self.stalls if at < to_s and at + late > from_s
        )

    async def _pace(self) -> None:
        for n in itertools.count():
            due = n / self.rate
            if self._stopping or due > self.max_s:
                return
            delay = due - self.now_s()
            if delay > 0:
                await asyncio.sleep(delay)  # the load's fixed rate, not a synchronisation
            answer = Answer(n, KINDS[n % len(KINDS)], self.now_s())
            self.answers.append(answer)
            task = asyncio.create_task(self._send(answer))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _send(self, answer: Answer) -> None:
        started = time.perf_counter()
        answer.sent_ms = time.time_ns() // 1_000_000
        try:
            response = await self.cluster.http.post(
                f"{self.cluster.url}/v1/hooks", json=hook_input(answer.n, answer.kind)
            )
        except httpx.HTTPError as exc:
            answer.error = f"{type(exc).__name__}: {exc}"
            answer.latency_s = time.perf_counter() - started
            return
        answer.latency_s = time.perf_counter() - started
        answer.status = response.status_code
        answer.outcome = response.headers.get("X-Hookbus-Outcome", "")
        answer.event_id = response.headers.get("X-Hookbus-Event-Id", "")
        try:
            answer.body = response.json()
        except ValueError:
            answer.body = response.text

    async def spans(self, seconds: float) -> None:
        """Return once the load has sent ``seconds`` worth of further requests (how long a fault is held)."""
        target = self.sent + int(seconds * self.rate)

        assert await poll(lambda: self.sent >= target, seconds + 10, interval_s=0.01), "the load stalled"

    def answered(self, since_s: float = 0.0, outcome: str = "decided") -> int:
        return sum(1 for a in self.answers if a.sent_s >= since_s and a.outcome == outcome and a.status == 200)

    async def stop(self) -> None:
        self._stopping = True
        if self._pacer is not None:
            await self._pacer
        if self._requests:  # each is bounded by the client's timeout
            await asyncio.gather(*self._requests)
        if self._watcher is not None:
            await self._watcher


# -- the run and the checks -----------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """What one chaos test saw: the answers, the problems found, numbers for the report."""

    answers: list[Answer] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    #: Seconds the load's own loop was stalled between two times (:meth:`Load.stalled_s`).
    stalled_s: Callable[[float, float], float] = lambda from_s, to_s: 0.0

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


Fault = Callable[[Load], Awaitable[None]]


async def run_chaos(cluster: Cluster, fault: Fault, *, warm_up_s: float = 1.0, tail: int = 40) -> Run:
    """Load, fault, recovery, then :func:`verify`. ``fault`` returns once the fault is lifted."""
    run = Run()
    gateway_before = await cluster.scrape(cluster.gateway)
    load = Load(cluster)
    load.start()
    try:
        warm = await poll(lambda: load.answered() >= warm_up_s * RATE / 2, warm_up_s + 10)
        run.check(bool(warm), f"no decisions before the fault: {load.answers[:5]}")
        fault_s = load.now_s()
        await fault(load)
        lifted_s = load.now_s()
        # Recovered: `tail` blocking events sent after the fault was lifted were decided.
        recovered = await poll(lambda: load.answered(since_s=lifted_s) >= tail, 20)
        run.check(
            bool(recovered),
            f"no recovery: {load.answered(since_s=lifted_s)} decided since the fault was lifted at {lifted_s:.2f}s",
        )
        run.notes.append(f"fault {fault_s:.2f}s..{lifted_s:.2f}s; load stopped at {load.now_s():.2f}s")
    finally:
        await load.stop()
    run.answers = load.answers
    run.stalled_s = load.stalled_s
    if load.stalls:
        run.notes.append(
            f"the load's own loop stalled {len(load.stalls)} times, "
            f"{max(late for _, late in load.stalls) * 1000:.0f} ms at most"
        )
    await verify(cluster, run, gateway_before)
    return run


async def settled_log(cluster: Cluster, ids: set[str], timeout_s: float = 20.0) -> dict[str, list[LogRecord]]:
    """The decision log by event id, once every id is in it, nothing is pending and the spool is empty."""
    bus = cluster.bus
    found: dict[str, list[LogRecord]] = {}

    async def settled() -> bool:
        found.clear()
        for record in await cluster.redis_call(lambda _: bus.log()):
            found.setdefault(record.event_id, []).append(record)
        streams = (bus.keys.blocking_stream(), bus.keys.events_stream())
        pending = [entry for stream in streams for entry in await bus.pending(stream)]
        unread = [stream for stream in streams if await bus.undelivered(stream)]  # a spooled entry sent again
        return ids <= found.keys() and not pending and not unread and await cluster.spool_held() == 0

    await poll(settled, timeout_s, interval_s=0.2)
    return found


async def async_results(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """arq's stored results by event id (job id = event id + ':' + handler id)."""
    redis_ = cluster.bus.redis
    results: dict[str, dict[str, Any]] = {}
    async for key in redis_.scan_iter(match=f"{ARQ_RESULT}*", count=1000):
        raw = await redis_.get(key)
        if raw is not None:
            results[key.decode()[len(ARQ_RESULT) :].split(":", 1)[0]] = orjson.loads(raw)
    return results


async def job_state(cluster: Cluster, event_id: str) -> str:
    """What Redis holds about the async job(s) of ``event_id``: arq's keys, the queue, the result."""
    redis_ = cluster.bus.redis
    found = []
    async for key in redis_.scan_iter(match=f"arq:*{event_id}*"):
        ttl = await redis_.pttl(key)
        value = await redis_.get(key) if key.startswith(ARQ_RESULT.encode()) else b""
        found.append(f"{key.decode()} (ttl {ttl} ms){' = ' + value.decode()[-120:] if value else ''}")
    queued = [m.decode() async for m, _ in redis_.zscan_iter(cluster.bus.keys.arq_queue, match=f"{event_id}*")]
    return f"{event_id}: keys {found or 'none'}, queued {queued or 'no'}"


def ran_ids(cluster: Cluster) -> list[str]:
    return cluster.ran_file.read_text().split() if cluster.ran_file.exists() else []


async def async_outcomes(cluster: Cluster, ids: set[str], timeout_s: float) -> tuple[set[str], set[str], set[str]]:
    """(ran, dead, failed) of the async jobs of ``ids``, once each is in one of them (or on timeout).

    ran: the hook appended the id; dead: hookbus gave up (the job's result says ``dead:``, as
    counted in ``hookbus_async_jobs_total{status="dead"}``); failed: arq gave up on its own
    (e.g. "max retries exceeded"), which hookbus neither ran nor counted.
    """
    ran: set[str] = set()
    dead: set[str] = set()
    failed: set[str] = set()

    async def done() -> bool:
        for found in (ran, dead, failed):
            found.clear()
        ran.update(ids.intersection(ran_ids(cluster)))
        for event_id, result in (await async_results(cluster)).items():
            if event_id not in ids or event_id in ran:
                continue
            if result.get("s") and str(result.get("r", "")).startswith("dead:"):
                dead.add(event_id)
            elif not result.get("s"):
                failed.add(event_id)
        return ids <= ran | dead | failed

    await poll(done, timeout_s, interval_s=0.2)
    return ran, dead, failed


def _sample(samples: dict[str, float], key: str) -> float:
    return samples.get(key, 0.0)


async def verify(cluster: Cluster, run: Run, gateway_before: dict[str, float], async_timeout_s: float = 30.0) -> None:
    answers = run.answers
    statuses = Counter(a.status for a in answers)
    outcomes = Counter(f"{a.kind}:{a.outcome or '-'}" for a in answers)
    run.notes.append(f"{len(answers)} requests; HTTP statuses {dict(statuses)}; outcomes {dict(outcomes)}")

    # Every request answered 200 (fail-open at worst), with an event id.
    not_ok = [a for a in answers if a.status != 200]
    run.check(not not_ok, f"{len(not_ok)} requests not answered 200: " + "; ".join(map(str, not_ok[:8])))
    no_id = [a for a in answers if a.status == 200 and not a.event_id]
    run.check(not no_id, f"{len(no_id)} answers without X-Hookbus-Event-Id: " + "; ".join(map(str, no_id[:5])))

    # Blocking answers on time: server side on the gateway's histogram here, client side (with
    # a margin) once the decision log says when the gateway received each request.
    gateway_after = await cluster.scrape(cluster.gateway)
    within_key = f'hookbus_decision_latency_seconds_bucket{{event="PreToolUse",le="{SERVER_BUCKET}"}}'
    total_key = 'hookbus_decision_latency_seconds_bucket{event="PreToolUse",le="+Inf"}'
    total = _sample(gateway_after, total_key) - _sample(gateway_before, total_key)
    within = _sample(gateway_after, within_key) - _sample(gateway_before, within_key)
    run.check(
        total > 0 and within == total,
        f"gateway: {total - within:.0f} of {total:.0f} PreToolUse answers "
        f"took longer than deadline + 50 ms (le={SERVER_BUCKET} histogram)",
    )

    # The decision log: nothing missing, nothing twice, nothing that disagrees with the answer.
    answered = {a.event_id: a for a in answers if a.event_id}
    log = await settled_log(cluster, set(answered))
    missing = [answered[i] for i in answered if i not in log]
    run.check(
        not missing, f"{len(missing)} answered events have no decision-log record: " + "; ".join(map(str, missing[:8]))
    )
    # One exception: a reply decided and logged, then lost with the connection while Redis went
    # away, is logged a second time as what the agent got (fail-open, bus.stream.settle).
    corrected = {
        i
        for i, records in log.items()
        if i in answered
        and answered[i].outcome == "fail-open"
        and [r.outcome for r in records] == ["decided", "fail-open"]
    }
    twice = {i: records for i, records in log.items() if len(records) > 1 and i not in corrected}
    run.check(
        not twice,
        f"{len(twice)} events logged more than once: "
        + "; ".join(
            f"{i}: {[(r.outcome, r.fail_open, r.decision) for r in records]}" for i, records in list(twice.items())[:5]
        ),
    )
    strangers = [i for i in log if i not in answered]
    run.check(not strangers, f"{len(strangers)} records of events nobody was answered for: {strangers[:5]}")
    disagree: list[str] = []
    wrong: list[str] = []
    for event_id, answer in answered.items():
        if event_id not in log or answer.status != 200:
            continue
        record = log[event_id][-1]  # the last one says what the agent got
        seen = (
            f"{answer} <-> record {record.event} outcome={record.outcome} fail_open={record.fail_open!r} "
            f"decision={record.decision}"
        )
        if answer.outcome == "decided":
            if record.outcome != "decided" or record.decision != answer.decision:
                disagree.append(seen)
            elif answer.decision != answer.expected:
                wrong.append(seen)
        elif answer.outcome == "fail-open":
            if record.outcome != "fail-open" or answer.body != {}:
                disagree.append(seen)
        elif answer.outcome == "recorded":
            if record.outcome != "recorded":
                disagree.append(seen)
        else:
            disagree.append(seen)
    run.check(not disagree, f"{len(disagree)} records disagree with the answer: " + "\n  ".join(["", *disagree[:10]]))
    run.check(not wrong, f"{len(wrong)} decided answers with the wrong decision: " + "\n  ".join(["", *wrong[:5]]))
    run.notes.append(
        f"decision log: {sum(map(len, log.values()))} records for {len(answered)} answered events "
        f"({len(corrected)} decided, then logged as answered fail-open: their replies were lost)"
    )

    # Client side, from when the gateway received each request to when this process read its answer.
    # What came before is this process's own queue: on a slow host, after a fault, its client (one
    # event loop, hundreds of requests at once) has sent requests seconds after they were due while
    # the gateway read and answered everything that reached it in time.
    def unsent_s(a: Answer) -> float:
        records = log.get(a.event_id)
        return max(0.0, records[0].received_ms - a.sent_ms) / 1000 if records and a.sent_ms else 0.0

    late = [
        a
        for a in answers
        if a.blocking
        and a.status == 200
        and a.latency_s - unsent_s(a) - run.stalled_s(a.sent_s, a.sent_s + a.latency_s) > DEADLINE_S + CLIENT_MARGIN_S
    ]
    run.check(
        not late,
        f"{len(late)} blocking answers later than deadline + {CLIENT_MARGIN_S * 1000:.0f} ms "
        "(client side): " + "; ".join(map(str, sorted(late, key=lambda a: -a.latency_s)[:8])),
    )
    blocking = [a for a in answers if a.blocking and a.status == 200]
    slowest = max((a.latency_s for a in blocking), default=0.0)
    held = max((unsent_s(a) for a in blocking), default=0.0)
    run.notes.append(
        f"slowest blocking answer (client side): {slowest * 1000:.0f} ms; the longest a request waited "
        f"in this process before the gateway received it: {held * 1000:.0f} ms"
    )

    # Async hooks: each Notification's hook ran, or was counted dead; none lost.
    notes = {a.event_id for a in answers if a.kind == "note" and a.event_id}
    ran, dead, failed = await async_outcomes(cluster, notes, async_timeout_s)
    lost = notes - ran - dead - failed
    run.check(
        not lost and not failed,
        f"async hooks lost: {len(lost)} never ran nor were counted dead, "
        f"{len(failed)} given up by arq uncounted: "
        + "; ".join([await job_state(cluster, i) for i in sorted(lost | failed)[:6]]),
    )
    runs = Counter(ran_ids(cluster))
    worker_dead = sum(
        [_sample(await cluster.scrape(w), 'hookbus_async_jobs_total{status="dead"}') for w in cluster.running("worker")]
    )
    enqueue_failed = sum(
        [
            _sample(await cluster.scrape(d), 'hookbus_async_jobs_total{status="failed"}')
            for d in cluster.running("dispatcher")
        ]
    )
    run.notes.append(
        f"async: {len(notes)} Notifications, {len(ran)} ran ({sum(1 for c in runs.values() if c > 1)} "
        f"more than once), {len(dead)} dead (worker metric: {worker_dead:.0f}), {len(lost)} lost; "
        f"enqueue failures counted by the running dispatchers: {enqueue_failed:.0f}"
    )

    # Every role still running (the test replaced the ones it killed), Redis too.
    gone = [r for r in cluster.roles if not r.retired and not r.alive()]
    run.check(not gone, f"roles not running at the end: {[(r.name, r.process.returncode) for r in gone]}")


def conclude(cluster: Cluster, run: Run) -> None:
    """Print what the run saw (``pytest -rP`` shows it) and fail with every problem and the roles' logs."""
    lines = ["", *run.notes]
    if run.problems:
        lines += ["PROBLEMS:", *(f"- {p}" for p in run.problems), "LOGS:"]
        lines += [role.log_excerpt() for role in cluster.roles]
    text = "\n".join(lines)
    print(text)
    assert not run.problems, text


@pytest_asyncio.fixture
async def chaos(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Cluster]]]:
    """``cluster = await chaos(dispatchers=N)``: Redis, N dispatchers, a worker and a gateway, all running."""
    clusters: list[Cluster] = []

    async def start(dispatchers: int = 1) -> Cluster:
        cluster = Cluster(tmp_path)
        clusters.append(cluster)
        await cluster.start(dispatchers)
        return cluster

    yield start
    for cluster in clusters:
        await cluster.stop()
